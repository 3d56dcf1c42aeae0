"""Deployment without a gateway: URLs in the seed's formats, every refused argument, and requests to a local stub
server (headers sent, bodies encoded, redirects not followed, answers that are not JSON)."""

from __future__ import annotations

import array
import json
import pickle
import ssl
import unittest
from typing import Any, Dict

from servegate import MODEL_SERVERS, Deployment, GatewayError, Response

from .support import KEY, Stub, json_answer

GW = "https://models.example.com"
BASE = f"{GW}/v1/fraud_detection/fraud"


def dep(**kwargs: Any) -> Deployment:
    args: Dict[str, Any] = {"gateway_url": GW, "project": "fraud_detection", "deployment": "fraud", "api_key": KEY}
    args.update(kwargs)
    return Deployment(**args)


class UrlTests(unittest.TestCase):
    def test_the_spec_example(self) -> None:
        d = Deployment(
            gateway_url="https://models.example.com",
            project="fraud_detection",
            deployment="fraud",
            model_server="sklearn",
            model_name="fraud",
            api_key=KEY,
        )
        self.assertEqual(d.get_inference_url(), f"{BASE}/v1/models/fraud:predict")
        self.assertIsNone(d.get_openai_url())
        self.assertIsNone(d.get_endpoint_url())
        self.assertEqual(d.get_base_url(), BASE)

    def test_every_kind(self) -> None:
        cases = [
            ("sklearn", {"model_server": "sklearn"}, f"{BASE}/v1/models/fraud:predict", None, None),
            ("python model server", {"model_server": "python"}, f"{BASE}/v1/models/fraud:predict", None, None),
            ("tensorflow", {"model_server": "tensorflow"}, f"{BASE}/v1/models/fraud:predict", None, None),
            ("a model name", {"model_server": "sklearn", "model_name": "fraud-v2"}, f"{BASE}/v1/models/fraud-v2:predict", None, None),
            ("v2", {"model_server": "sklearn", "protocol": "v2"}, f"{BASE}/v2/models/fraud/infer", None, None),
            ("llm", {"model_server": "llm"}, None, f"{BASE}/v1", None),
            ("llm with a served name", {"model_server": "llm", "model_name": "meta-llama/Llama-3.1-8B"}, None, f"{BASE}/v1", None),
            ("python deployment", {"type": "python"}, None, None, BASE),
            ("scikit-learn", {"model_server": "scikit-learn"}, f"{BASE}/v1/models/fraud:predict", None, None),
            ("TensorFlow", {"model_server": " TensorFlow "}, f"{BASE}/v1/models/fraud:predict", None, None),
            ("tf", {"model_server": "tf"}, f"{BASE}/v1/models/fraud:predict", None, None),
            ("vllm", {"model_server": "vllm"}, None, f"{BASE}/v1", None),
        ]
        for name, kwargs, inference, openai, endpoint in cases:
            with self.subTest(name):
                d = dep(**kwargs)
                self.assertEqual(d.get_inference_url(), inference)
                self.assertEqual(d.get_openai_url(), openai)
                self.assertEqual(d.get_endpoint_url(), endpoint)
                self.assertEqual(d.get_base_url(), BASE)

    def test_gateway_url_forms(self) -> None:
        for gw, base in [
            ("https://models.example.com/", "https://models.example.com/v1/p/d"),
            ("https://models.example.com//", "https://models.example.com/v1/p/d"),
            ("  https://models.example.com\n", "https://models.example.com/v1/p/d"),
            ("http://10.0.0.1:8080/serving", "http://10.0.0.1:8080/serving/v1/p/d"),
            ("http://[::1]:8080", "http://[::1]:8080/v1/p/d"),
        ]:
            with self.subTest(gw):
                d = Deployment(gateway_url=gw, project="p", deployment="d", type="python", api_key=KEY)
                self.assertEqual(d.get_endpoint_url(), base)

    def test_verb_urls(self) -> None:
        tf = dep(model_server="tensorflow", model_name="digits")
        self.assertEqual(tf.get_verb_url("classify"), f"{BASE}/v1/models/digits:classify")
        self.assertEqual(tf.get_verb_url("regress"), f"{BASE}/v1/models/digits:regress")
        with self.assertRaisesRegex(ValueError, r"offers only :predict; :classify needs a tensorflow"):
            dep(model_server="sklearn").get_verb_url("classify")
        with self.assertRaisesRegex(ValueError, "is not a predictive model"):
            dep(model_server="llm").get_verb_url("predict")
        with self.assertRaisesRegex(ValueError, r"use infer\(\)"):
            dep(model_server="sklearn", protocol="v2").get_verb_url("predict")

    def test_from_resource(self) -> None:
        d = Deployment.from_resource(
            {
                "metadata": {"name": "fraud", "namespace": "fraud-detection"},
                "spec": {"project": "fraud_detection", "type": "model", "modelServer": "tensorflow", "modelName": "m1"},
                "status": {"url": "https://gw.example.com/v1/fraud_detection/fraud"},
            },
            api_key=KEY,
        )
        self.assertEqual(d.get_inference_url(), "https://gw.example.com/v1/fraud_detection/fraud/v1/models/m1:predict")
        py = Deployment.from_resource(
            {"metadata": {"name": "echo", "namespace": "demo"}, "spec": {"type": "python"}},
            api_key=KEY,
            gateway_url="http://gw",
        )
        self.assertEqual(py.get_endpoint_url(), "http://gw/v1/demo/echo")
        with self.assertRaisesRegex(ValueError, "no status.url yet: pass gateway_url"):
            Deployment.from_resource({"metadata": {"name": "x", "namespace": "n"}, "spec": {}}, api_key=KEY)
        with self.assertRaisesRegex(ValueError, "no metadata.name"):
            Deployment.from_resource({}, api_key=KEY)

    def test_repr_never_shows_the_key(self) -> None:
        d = dep(model_server="sklearn")
        self.assertNotIn(KEY.split(".")[1], repr(d))
        self.assertNotIn(KEY.split(".")[1], repr(d.__dict__.get("_opener")))
        self.assertIn("project='fraud_detection'", repr(d))

    def test_model_servers(self) -> None:
        self.assertEqual(MODEL_SERVERS, ("python", "sklearn", "tensorflow", "llm"))


class RefusedTests(unittest.TestCase):
    def test_bad_arguments_are_refused_with_a_message_naming_them(self) -> None:
        cases = [
            ("no model server", {}, ValueError, "needs model_server"),
            ("an unknown model server", {"model_server": "pytorch"}, ValueError, "needs model_server"),
            ("a model server that is not a str", {"model_server": 3}, ValueError, "needs model_server"),
            ("a model server on a python deployment", {"type": "python", "model_server": "sklearn"}, ValueError, 'only for type "model"'),
            ("an unknown type", {"type": "server"}, ValueError, 'type must be "model" or "python"'),
            ("a gateway URL without a scheme", {"model_server": "sklearn", "gateway_url": "models.example.com"}, ValueError, "gateway_url"),
            ("an ftp gateway URL", {"model_server": "sklearn", "gateway_url": "ftp://x"}, ValueError, "http"),
            ("a gateway URL with a query", {"model_server": "sklearn", "gateway_url": "https://x.example.com/?a=1"}, ValueError, "query"),
            ("a gateway URL with a fragment", {"model_server": "sklearn", "gateway_url": "https://x.example.com/#a"}, ValueError, "fragment"),
            ("a gateway URL with a password", {"model_server": "sklearn", "gateway_url": "https://u:p@x.example.com"}, ValueError, "password"),
            ("a gateway URL with a bad port", {"model_server": "sklearn", "gateway_url": "http://x:99999"}, ValueError, "gateway_url"),
            ("a gateway URL with a space", {"model_server": "sklearn", "gateway_url": "http://x y"}, ValueError, "gateway_url"),
            ("a gateway URL that is not a str", {"model_server": "sklearn", "gateway_url": b"http://x"}, TypeError, "gateway_url"),
            ("no key", {"model_server": "sklearn", "api_key": ""}, ValueError, "api_key is required"),
            ("a blank key", {"model_server": "sklearn", "api_key": "  "}, ValueError, "api_key is required"),
            ("a key that is not a str", {"model_server": "sklearn", "api_key": None}, ValueError, "api_key is required"),
            ("a key with a line break", {"model_server": "sklearn", "api_key": "abc\r\ndef"}, ValueError, "api_key contains"),
            ("a project with a slash", {"model_server": "sklearn", "project": "a/b"}, ValueError, "project"),
            ("an empty deployment", {"model_server": "sklearn", "deployment": ""}, ValueError, "deployment"),
            ("a deployment with ..", {"model_server": "sklearn", "deployment": ".."}, ValueError, "deployment"),
            ("a model name with a slash", {"model_server": "sklearn", "model_name": "a/b"}, ValueError, "model_name"),
            ("a model name on a python deployment", {"type": "python", "model_name": "m"}, ValueError, "model_name"),
            ("an empty model name", {"model_server": "llm", "model_name": ""}, ValueError, "model_name"),
            ("an unknown protocol", {"model_server": "sklearn", "protocol": "v3"}, ValueError, "protocol"),
            ("protocol v2 on an llm", {"model_server": "llm", "protocol": "v2"}, ValueError, "predictive model servers only"),
            ("a negative timeout", {"model_server": "sklearn", "timeout": -1}, ValueError, "timeout"),
            ("an infinite timeout", {"model_server": "sklearn", "timeout": float("inf")}, ValueError, "timeout"),
            ("a timeout that is a str", {"model_server": "sklearn", "timeout": "5"}, TypeError, "timeout"),
            ("a timeout that is a bool", {"model_server": "sklearn", "timeout": True}, TypeError, "timeout"),
            ("headers that are a list", {"model_server": "sklearn", "headers": [("a", "b")]}, TypeError, "headers"),
            ("a header value that is not a str", {"model_server": "sklearn", "headers": {"x-a": 1}}, TypeError, "x-a"),
            ("a header with a line break", {"model_server": "sklearn", "headers": {"x-a": "1\r\nx-b: 2"}}, ValueError, "line break"),
            ("a header name with a space", {"model_server": "sklearn", "headers": {"x a": "1"}}, ValueError, "header name"),
            ("an authorization header", {"model_server": "sklearn", "headers": {"Authorization": "Bearer x"}}, ValueError, "api_key"),
            ("an ssl_context that is not one", {"model_server": "sklearn", "ssl_context": True}, TypeError, "ssl_context"),
        ]
        for name, kwargs, error, message in cases:
            with self.subTest(name):
                with self.assertRaisesRegex(error, message):
                    dep(**kwargs)

    def test_positional_arguments_are_refused(self) -> None:
        with self.assertRaises(TypeError):
            Deployment(GW, "p", "d")  # type: ignore[misc]

    def test_calls_a_kind_does_not_offer_raise_before_sending(self) -> None:
        # The gateway URL points nowhere: a request would raise GatewayError, not ValueError.
        nowhere = {"gateway_url": "http://127.0.0.1:9"}
        sklearn = dep(model_server="sklearn", **nowhere)
        llm = dep(model_server="llm", **nowhere)
        py = dep(type="python", **nowhere)
        v1 = dep(model_server="tensorflow", **nowhere)
        cases = [
            ("classify on sklearn", lambda: sklearn.classify([{"x": 1}]), r"offers only :predict"),
            ("regress on sklearn", lambda: sklearn.regress([{"x": 1}]), r"offers only :predict"),
            ("predict on an llm", lambda: llm.predict([[1]]), "not a predictive model"),
            ("predict on a python deployment", lambda: py.predict([[1]]), "not a predictive model"),
            ("infer on a v1 model", lambda: v1.infer([]), "does not speak the Open Inference Protocol"),
            ("openai_client_kwargs on sklearn", sklearn.openai_client_kwargs, "not an LLM deployment"),
            ("openai_client_kwargs on python", py.openai_client_kwargs, "not an LLM deployment"),
            ("chat_completions on sklearn", lambda: sklearn.chat_completions(messages=[]), "not an LLM deployment"),
            ("chat_completions streamed", lambda: llm.chat_completions(messages=[], stream=True), "does not stream"),
            ("chat_completions without messages", lambda: llm.chat_completions(), "needs messages"),
            ("predict with nothing", lambda: sklearn.predict(), r"exactly one of instances= or inputs= \(got none\)"),
            ("predict with both", lambda: sklearn.predict([[1]], inputs=[[1]]), r"\(got both\)"),
            ("classify with two", lambda: v1.classify([{}], instances=[[1]]), "exactly one of examples="),
            ("predict with NaN", lambda: sklearn.predict([[float("nan")]]), "NaN"),
            ("predict with a set", lambda: sklearn.predict({1, 2}), "not JSON serializable"),
            ("infer with a dict", lambda: dep(model_server="sklearn", protocol="v2", **nowhere).infer({"a": 1}), "list of input tensors"),
        ]
        for name, call, message in cases:
            with self.subTest(name):
                with self.assertRaisesRegex((ValueError, TypeError), message):
                    call()

    def test_request_arguments(self) -> None:
        py = dep(type="python", gateway_url="http://127.0.0.1:9")
        cases = [
            ("a full URL", lambda: py.request("GET", "https://elsewhere.example.com/x"), ValueError, "not a full URL"),
            ("a scheme-relative URL", lambda: py.request("GET", "//elsewhere.example.com/x"), ValueError, "not a full URL"),
            ("a .. segment", lambda: py.request("GET", "/a/../../other/x"), ValueError, r"'\.\.' segments"),
            ("a . segment", lambda: py.request("GET", "./x"), ValueError, r"'\.\.' segments"),
            ("a fragment", lambda: py.request("GET", "/x#top"), ValueError, "fragment"),
            ("a path that is not a str", lambda: py.request("GET", 5), TypeError, "path"),
            ("a method with a space", lambda: py.request("GE T", "/"), ValueError, "method"),
            ("a method that is not a str", lambda: py.request(None, "/"), ValueError, "method"),
            ("json and data", lambda: py.request("POST", "/", json={}, data=b""), ValueError, "not both"),
            ("data that is a dict", lambda: py.request("POST", "/", data={"a": 1}), TypeError, "use json="),
            ("json that is not JSON", lambda: py.request("POST", "/", json=object()), TypeError, "json cannot be sent"),
            ("params that are a list", lambda: py.request("GET", "/", params=[1]), TypeError, "params"),
            ("an authorization header", lambda: py.request("GET", "/", headers={"authorization": "x"}), ValueError, "api_key"),
        ]
        for name, call, error, message in cases:
            with self.subTest(name):
                with self.assertRaisesRegex(error, message):
                    call()

    def test_openai_client_kwargs(self) -> None:
        llm = dep(model_server="llm")
        self.assertEqual(llm.openai_client_kwargs(), {"base_url": f"{BASE}/v1", "api_key": KEY})
        llm = dep(model_server="llm", timeout=2.5, headers={"x-team": "fraud"})
        self.assertEqual(
            llm.openai_client_kwargs(),
            {"base_url": f"{BASE}/v1", "api_key": KEY, "timeout": 2.5, "default_headers": {"x-team": "fraud"}},
        )


class StubServerTests(unittest.TestCase):
    """Requests against a local http.server: what goes on the wire, and how answers become results or errors."""

    def setUp(self) -> None:
        self.answers: Dict[str, Any] = {}

        def handler(method: str, path: str, headers: Dict[str, str], body: bytes):  # type: ignore[no-untyped-def]
            for prefix, answer in self.answers.items():
                if path.startswith(prefix):
                    return answer
            return json_answer(200, {"method": method, "path": path, "body": body.decode("utf-8", "replace")})

        self.stub = Stub(handler)
        self.addCleanup(self.stub.close)

    def d(self, **kwargs: Any) -> Deployment:
        args: Dict[str, Any] = {"gateway_url": self.stub.url, "project": "demo", "deployment": "echo", "api_key": KEY}
        args.update(kwargs)
        return Deployment(**args)

    def test_predict_sends_the_key_json_and_a_user_agent(self) -> None:
        out = self.d(model_server="sklearn", headers={"x-team": "fraud"}).predict(
            [[1, 2]], signature_name="serving_default"
        )
        self.assertEqual(out["path"], "/v1/demo/echo/v1/models/echo:predict")
        self.assertEqual(json.loads(out["body"]), {"instances": [[1, 2]], "signature_name": "serving_default"})
        seen = self.stub.requests[-1]
        self.assertEqual(seen["method"], "POST")
        self.assertEqual(seen["headers"]["authorization"], f"ApiKey {KEY}")
        self.assertEqual(seen["headers"]["content-type"], "application/json")
        self.assertEqual(seen["headers"]["x-team"], "fraud")
        self.assertRegex(seen["headers"]["user-agent"], r"^servegate-python/\d")

    def test_array_likes_are_sent_as_lists(self) -> None:
        class FakeNdarray:
            def tolist(self) -> Any:
                return [[0.5, 1.5]]

        out = self.d(model_server="sklearn").predict(inputs=FakeNdarray())
        self.assertEqual(json.loads(out["body"]), {"inputs": [[0.5, 1.5]]})
        out = self.d(model_server="sklearn").predict([array.array("d", [1.0, 2.0])])
        self.assertEqual(json.loads(out["body"]), {"instances": [[1.0, 2.0]]})

    def test_request_bodies_methods_paths_and_params(self) -> None:
        py = self.d(type="python")
        self.assertEqual(py.request("patch", "echo", data="héllo").json()["method"], "PATCH")
        seen = self.stub.requests[-1]
        self.assertEqual(seen["path"], "/v1/demo/echo/echo")
        self.assertEqual(seen["body"], "héllo".encode())
        self.assertEqual(seen["headers"]["content-type"], "text/plain; charset=utf-8")
        py.request("PUT", "/raw", data=b"\x00\x01", headers={"Content-Type": "application/x-thing"})
        self.assertEqual(self.stub.requests[-1]["headers"]["content-type"], "application/x-thing")
        py.request("POST", "/j?a=1", json={"x": [1]}, params={"b": "two words", "c": [1, 2]})
        seen = self.stub.requests[-1]
        self.assertEqual(seen["path"], "/v1/demo/echo/j?a=1&b=two+words&c=1&c=2")
        self.assertEqual(seen["body"], b'{"x":[1]}')
        py.request("GET", "/a b/é")
        self.assertEqual(self.stub.requests[-1]["path"], "/v1/demo/echo/a%20b/%C3%A9")
        py.request("GET")
        self.assertEqual(self.stub.requests[-1]["path"], "/v1/demo/echo")
        head = py.request("HEAD", "/h")
        self.assertEqual((head.status, head.content), (200, b""))

    def test_response(self) -> None:
        self.answers["/v1/demo/echo/latin"] = (200, {"content-type": "text/plain; charset=latin-1", "x-request-id": "r1"}, "é".encode("latin-1"))
        res = self.d(type="python").request("GET", "/latin")
        self.assertIsInstance(res, Response)
        self.assertTrue(res.ok)
        self.assertEqual(res.text, "é")
        self.assertEqual(res.request_id, "r1")
        self.assertEqual(res.headers.get("Content-Type"), "text/plain; charset=latin-1")
        self.assertIn("200", repr(res))

    def test_a_redirect_is_not_followed(self) -> None:
        elsewhere = Stub(lambda *a: json_answer(200, {"took": "the key"}))
        self.addCleanup(elsewhere.close)
        self.answers["/v1/demo/echo/moved"] = (302, {"location": f"{elsewhere.url}/steal"}, b"")
        py = self.d(type="python")
        res = py.request("POST", "/moved", json={}, raise_on_error=False)
        self.assertEqual(res.status, 302)
        with self.assertRaises(GatewayError) as caught:
            py.request("GET", "/moved")
        self.assertEqual(caught.exception.status, 302)
        self.assertEqual(elsewhere.requests, [])

    def test_an_answer_that_is_not_json(self) -> None:
        self.answers["/v1/demo/echo/v1/models"] = (200, {"content-type": "text/html", "x-request-id": "r2"}, b"<html>")
        with self.assertRaises(GatewayError) as caught:
            self.d(model_server="sklearn").predict([[1]])
        err = caught.exception
        self.assertEqual((err.status, err.body, err.request_id), (200, "<html>", "r2"))
        self.assertIn("is not JSON", err.message)

    def test_an_empty_answer_is_none(self) -> None:
        self.answers["/v1/demo/echo/v1/models"] = (200, {}, b"")
        self.assertIsNone(self.d(model_server="sklearn").predict([[1]]))

    def test_error_answers(self) -> None:
        self.answers["/v1/demo/echo/v1/models"] = json_answer(
            429,
            {"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
            {"retry-after": "7", "x-request-id": "r3"},
        )
        with self.assertRaises(GatewayError) as caught:
            self.d(model_server="sklearn").predict([[1]])
        err = caught.exception
        self.assertEqual((err.status, err.code, err.type, err.message), (429, "rate_limit_exceeded", "rate_limit_error", "slow down"))
        self.assertEqual((err.headers["retry-after"], err.request_id), ("7", "r3"))
        self.assertEqual(str(err), "HTTP 429: slow down")
        self.assertTrue(err.url.endswith(":predict"))
        again = pickle.loads(pickle.dumps(err))
        self.assertEqual((again.status, again.code, str(again)), (429, "rate_limit_exceeded", "HTTP 429: slow down"))

    def test_https_with_a_context(self) -> None:
        # A context that trusts no CA, against a server that speaks plain HTTP: the TLS failure is a connection error.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        port = self.stub.server.server_address[1]
        d = Deployment(gateway_url=f"https://127.0.0.1:{port}", project="p", deployment="d", type="python",
                       api_key=KEY, ssl_context=ctx, timeout=5)
        with self.assertRaises(GatewayError) as caught:
            d.request("GET", "/")
        self.assertIsNone(caught.exception.status)
        self.assertEqual(caught.exception.code, "connection_error")
        self.assertIn(f"https://127.0.0.1:{port}", caught.exception.message)
