"""Helpers for the tests: a local stub HTTP server (http.server in a thread) and the fixture of a running gateway."""

from __future__ import annotations

import json
import os
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

KEY = "Rc0uebjeAbSzEyRH.abcdefghijklmnopqrstuvwxyz012345678"

# What a stub handler returns: status, headers, body.
Answer = Tuple[int, Dict[str, str], bytes]


class Stub:
    """An HTTP server on 127.0.0.1 that records requests and answers with `handler(method, path, headers, body)`."""

    def __init__(self, handler: Callable[[str, str, Dict[str, str], bytes], Answer]) -> None:
        self.requests: List[Dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                stub.requests.append({"method": self.command, "path": self.path, "headers": headers, "body": body})
                status, out_headers, out = handler(self.command, self.path, headers, body)
                self.send_response(status)
                for k, v in out_headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def json_answer(status: int, body: Any, headers: Optional[Dict[str, str]] = None) -> Answer:
    return status, {"content-type": "application/json", **(headers or {})}, json.dumps(body).encode()


def fixture() -> Optional[Dict[str, Any]]:
    """The running gateway that servegate's npm test started (a JSON file named by SERVEGATE_TEST_FIXTURE)."""
    path = os.environ.get("SERVEGATE_TEST_FIXTURE")
    if not path:
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


needs_gateway = unittest.skipUnless(
    os.environ.get("SERVEGATE_TEST_FIXTURE"),
    "needs a running gateway: servegate's npm test (test/client/python.test.ts) sets SERVEGATE_TEST_FIXTURE",
)
