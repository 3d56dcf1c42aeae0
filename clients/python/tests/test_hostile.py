"""Answers a client must survive: nested too deeply to parse, trickled a byte at a time, endless error bodies, silence;
and proxies from the environment. Each against a server on 127.0.0.1 that writes exact bytes."""

from __future__ import annotations

import os
import socket
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List
from unittest import mock

import servegate
from servegate import Deployment, GatewayError
from servegate import _http

from .support import KEY, Stub

NESTED = b"[" * 60_000


class RawServer:
    """Accepts connections on 127.0.0.1 and hands each socket, with the request head read, to `serve(sock)`."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        self.sockets: List[socket.socket] = []

        def accept() -> None:
            while not self.closed:
                try:
                    sock, _ = self.listener.accept()
                except OSError:
                    return
                self.sockets.append(sock)
                threading.Thread(target=self._one, args=(sock, serve), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()

    @staticmethod
    def _one(sock: socket.socket, serve: Callable[[socket.socket], None]) -> None:
        head = b""
        sock.settimeout(10)
        try:
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                head += chunk
            serve(sock)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


def trickle(data: bytes, every: float) -> Callable[[socket.socket], None]:
    def serve(sock: socket.socket) -> None:
        for i in range(len(data)):
            sock.sendall(data[i : i + 1])
            time.sleep(every)

    return serve


def python_deployment(url: str, **kwargs: Any) -> Deployment:
    return Deployment(gateway_url=url, project="demo", deployment="echo", type="python", api_key=KEY, **kwargs)


class MalformedAnswerTests(unittest.TestCase):
    def setUp(self) -> None:
        self.answers: Dict[str, Any] = {}
        self.stub = Stub(lambda method, path, headers, body: self.answers[path.rsplit("/", 1)[-1]])
        self.addCleanup(self.stub.close)

    def test_every_malformed_answer_is_a_gateway_error(self) -> None:
        json_type = {"content-type": "application/json"}
        self.answers.update(
            {
                "nested": (200, json_type, NESTED),
                "nested-error": (502, json_type, NESTED),
                "latin1": (200, json_type, b'{"a": "\xe9"}'),
                "garbage": (200, json_type, b"\x00\xff{"),
            }
        )
        for name, status in (("nested", 200), ("latin1", 200), ("garbage", 200)):
            with self.subTest(name):
                d = Deployment(gateway_url=self.stub.url, project="demo", deployment="d", model_server="sklearn",
                               model_name=name, api_key=KEY, timeout=10)
                # predict() calls .../v1/models/<name>:predict: the stub answers by the last path segment.
                self.answers[f"{name}:predict"] = self.answers[name]
                with self.assertRaises(GatewayError) as caught:
                    d.predict([[1]])
                self.assertEqual((caught.exception.status, caught.exception.code), (status, None))
                self.assertIn("is not JSON", caught.exception.message)
        py = python_deployment(self.stub.url, timeout=10)
        with self.assertRaises(GatewayError) as caught:  # the error body is read for its message: not a RecursionError
            py.request("GET", "/nested-error")
        self.assertEqual(caught.exception.status, 502)
        with self.assertRaisesRegex(ValueError, "nested too deeply"):  # Response.json(): ValueError, as documented
            py.request("GET", "/nested").json()


class DeadlineTests(unittest.TestCase):
    def serve(self, handler: Callable[[socket.socket], None]) -> str:
        server = RawServer(handler)
        self.addCleanup(server.close)
        return server.url

    def timed_out(self, call: Callable[[], Any]) -> float:
        started = time.monotonic()
        with self.assertRaises(GatewayError) as caught:
            call()
        self.assertEqual((caught.exception.status, caught.exception.code), (None, "timeout"))
        return time.monotonic() - started

    def test_the_deadline_covers_a_head_trickled_a_byte_at_a_time(self) -> None:
        head = b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"a" * 200 + b"\r\ncontent-length: 0\r\n\r\n"
        url = self.serve(trickle(head, 0.05))  # 11 s in all; each byte well inside the timeout
        elapsed = self.timed_out(lambda: python_deployment(url, timeout=1).request("GET", "/"))
        self.assertLess(elapsed, 3)

    def test_the_deadline_covers_a_body_trickled_a_byte_at_a_time(self) -> None:
        body = b"x" * 100
        answer = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body)

        def serve(sock: socket.socket) -> None:
            sock.sendall(answer)
            trickle(body, 0.1)(sock)  # 10 s in all

        url = self.serve(serve)
        elapsed = self.timed_out(lambda: python_deployment(url, timeout=1).request("GET", "/"))
        self.assertLess(elapsed, 3)

    def test_a_close_delimited_body_cut_by_the_deadline_is_not_taken_as_whole(self) -> None:
        def serve(sock: socket.socket) -> None:
            sock.sendall(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
            trickle(b"y" * 100, 0.1)(sock)

        url = self.serve(serve)
        self.timed_out(lambda: python_deployment(url, timeout=0.5).request("GET", "/"))

    def test_a_silent_server_meets_the_default_deadline_and_a_call_may_set_its_own(self) -> None:
        url = self.serve(lambda sock: time.sleep(10))
        self.assertEqual(servegate.DEFAULT_TIMEOUT, 60)
        self.assertEqual(python_deployment(url).timeout, 60)
        with mock.patch.object(_http, "DEFAULT_TIMEOUT", 0.5):
            d = python_deployment(url)  # no timeout given: the default deadline
        self.assertLess(self.timed_out(lambda: d.request("GET", "/")), 3)
        slow = python_deployment(url, timeout=30)
        started = time.monotonic()
        with self.assertRaises(GatewayError) as caught:
            slow.request("GET", "/", timeout=0.5)
        self.assertLess(time.monotonic() - started, 3)
        self.assertIn("within 0.5 s", caught.exception.message)

    def test_timeout_none_is_no_deadline_and_the_openai_sdk_gets_only_a_timeout_that_was_given(self) -> None:
        self.assertIsNone(python_deployment("http://127.0.0.1:9", timeout=None).timeout)
        llm = Deployment(gateway_url="http://127.0.0.1:9", project="p", deployment="d", model_server="llm", api_key=KEY)
        self.assertNotIn("timeout", llm.openai_client_kwargs())


class BoundedErrorBodyTests(unittest.TestCase):
    def test_an_endless_error_body_is_read_up_to_64_kib_and_the_connection_closed(self) -> None:
        declared = 256 * 1024 * 1024
        sent = [0]
        done = threading.Event()

        def serve(sock: socket.socket) -> None:
            try:
                sock.sendall(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: %d\r\n\r\n" % declared)
                block = b"z" * 65536
                while sent[0] < declared:
                    sock.sendall(block)
                    sent[0] += len(block)
            finally:
                done.set()

        server = RawServer(serve)
        self.addCleanup(server.close)
        d = python_deployment(server.url, timeout=30)
        with self.assertRaises(GatewayError) as caught:
            d.request("GET", "/")
        self.assertEqual(caught.exception.status, 502)
        self.assertEqual(len(caught.exception.body), 65536)
        res = d.request("GET", "/", raise_on_error=False)
        self.assertEqual((res.status, len(res.content)), (502, 65536))
        self.assertTrue(done.wait(10), "the server is still sending: the client did not close")
        self.assertLess(sent[0], declared // 4)


class ProxyTests(unittest.TestCase):
    """urllib's ProxyHandler, which the client keeps: http_proxy is read when the Deployment is made, no_proxy at
    each request."""

    def setUp(self) -> None:
        self.target = Stub(lambda method, path, headers, body: (200, {}, b"from the target"))
        self.addCleanup(self.target.close)
        self.seen: List[str] = []
        seen = self.seen

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # a forward proxy: an absolute URI in the request line
                seen.append(self.path)
                import urllib.request as ur

                req = ur.Request(self.path, headers={"authorization": self.headers.get("authorization", "")})
                with ur.build_opener(ur.ProxyHandler({})).open(req, timeout=10) as res:
                    body = res.read()
                self.send_response(res.status)
                self.send_header("content-length", str(len(body)))
                self.send_header("x-via-test-proxy", "1")
                self.end_headers()
                self.wfile.write(body)

        self.proxy = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.proxy.daemon_threads = True
        threading.Thread(target=self.proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.addCleanup(self.proxy.server_close)
        self.addCleanup(self.proxy.shutdown)
        self.proxy_url = f"http://127.0.0.1:{self.proxy.server_address[1]}"

    def env(self, **values: str) -> Any:
        cleared = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        return mock.patch.dict(os.environ, {**cleared, **values}, clear=True)

    def test_http_proxy_is_honoured_and_no_proxy_bypasses_it(self) -> None:
        with self.env(http_proxy=self.proxy_url):
            res = python_deployment(self.target.url, timeout=10).request("GET", "/via")
        self.assertEqual((res.text, res.headers.get("x-via-test-proxy")), ("from the target", "1"))
        self.assertEqual(self.seen, [f"{self.target.url}/v1/demo/echo/via"])
        self.assertEqual(self.target.requests[-1]["headers"]["authorization"], f"ApiKey {KEY}")
        with self.env(HTTP_PROXY=self.proxy_url, no_proxy="127.0.0.1"):
            res = python_deployment(self.target.url, timeout=10).request("GET", "/direct")
        self.assertIsNone(res.headers.get("x-via-test-proxy"))
        self.assertEqual(len(self.seen), 1)
