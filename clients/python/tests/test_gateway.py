"""The client against a real servegate gateway and real backends: every call, every error, each kind.

servegate's npm test (test/client/python.test.ts) starts the gateway, the backends and these deployments, then runs
this suite with SERVEGATE_TEST_FIXTURE naming a JSON file: the gateway URL, two keys, a closed port, and the URL
cases the TypeScript client computed (so that both clients are compared on the same inputs).

  fraud_detection/fraud (namespace fraud-detection)  sklearn            V1 echo backend
  demo/iris       python model server                V1 echo backend
  demo/mnist      tensorflow, modelName digits       V1 echo backend
  demo/oip        sklearn, protocol v2               V1 echo backend (echoes any path)
  demo/chat       llm                                OpenAI-compatible backend
  demo/limited    llm, 1 request per minute          OpenAI-compatible backend
  demo/echo       type python                        Python-style echo backend (/status/<n> answers n)
  demo/slow       type python, timeoutSeconds 1      answers after 10 s: the gateway's 504
  demo/sleepy     type python                        answers after 10 s: the client's own timeout
  demo/broken     type python                        a closed port: the gateway's 502
"""

from __future__ import annotations

import json
import os
import unittest
import urllib.request
from typing import Any, Dict

import servegate
from servegate import Deployment, GatewayError

from .support import fixture, needs_gateway

F: Dict[str, Any] = fixture() or {}


def dep(project: str, deployment: str, **kwargs: Any) -> Deployment:
    args: Dict[str, Any] = {"gateway_url": F["gatewayUrl"], "api_key": F["key"], "timeout": 10}
    args.update(kwargs)
    return Deployment(project=project, deployment=deployment, **args)


def raised(call: Any) -> GatewayError:
    try:
        call()
    except GatewayError as err:
        return err
    raise AssertionError("no GatewayError was raised")


@needs_gateway
class InstalledTests(unittest.TestCase):
    def test_the_package_comes_from_the_install_under_test(self) -> None:
        where = F.get("installedIn")
        if where:
            self.assertTrue(
                os.path.realpath(servegate.__file__).startswith(os.path.realpath(where) + os.sep),
                f"servegate was imported from {servegate.__file__}, not from {where}",
            )


@needs_gateway
class SameUrlsAsTheTypeScriptClient(unittest.TestCase):
    def test_urls(self) -> None:
        self.assertGreater(len(F["urlCases"]), 10)
        for case in F["urlCases"]:
            with self.subTest(case["name"]):
                d = Deployment(api_key=F["key"], **case["kwargs"])
                got = {
                    "base": d.get_base_url(),
                    "inference": d.get_inference_url(),
                    "openai": d.get_openai_url(),
                    "endpoint": d.get_endpoint_url(),
                }
                self.assertEqual(got, case["expected"])

    def test_what_the_typescript_client_refuses_is_refused(self) -> None:
        self.assertGreater(len(F["refusedCases"]), 5)
        for case in F["refusedCases"]:
            with self.subTest(case["name"]):
                kwargs = {"api_key": F["key"], **case["kwargs"]}
                with self.assertRaises((ValueError, TypeError)):
                    Deployment(**kwargs)


@needs_gateway
class CallTests(unittest.TestCase):
    def test_predict_reaches_an_sklearn_model_at_the_seed_url(self) -> None:
        d = dep("fraud_detection", "fraud", model_server="sklearn", model_name="fraud")
        self.assertEqual(d.get_inference_url(), f"{F['gatewayUrl']}/v1/fraud_detection/fraud/v1/models/fraud:predict")
        out = d.predict(instances=[[1, 2, 3, 4]])
        self.assertIsInstance(out, dict)
        self.assertEqual(out["path"], "/v1/models/fraud:predict")
        self.assertEqual(out["received"], {"instances": [[1, 2, 3, 4]]})
        self.assertEqual(out["predictions"], [1, 0])

    def test_predict_with_inputs_and_the_namespace_form_of_the_project(self) -> None:
        out = dep("fraud-detection", "fraud", model_server="sklearn").predict(inputs=[[1.5]], parameters={"a": 1})
        self.assertEqual((out["verb"], out["received"]), ("predict", {"inputs": [[1.5]], "parameters": {"a": 1}}))

    def test_predict_on_the_python_model_server(self) -> None:
        out = dep("demo", "iris", model_server="python").predict([[6.8, 2.8, 4.8, 1.4]])
        self.assertEqual(out["path"], "/v1/models/iris:predict")

    def test_classify_and_regress_reach_a_tensorflow_model_under_its_model_name(self) -> None:
        d = dep("demo", "mnist", model_server="tensorflow", model_name="digits")
        self.assertEqual(d.classify([{"x": 1}])["path"], "/v1/models/digits:classify")
        self.assertEqual(d.regress(examples=[{"x": 1}])["path"], "/v1/models/digits:regress")
        self.assertEqual(d.classify(instances=[[1]])["received"], {"instances": [[1]]})
        self.assertEqual(d.predict([[1]])["path"], "/v1/models/digits:predict")

    def test_infer_on_a_v2_model(self) -> None:
        d = dep("demo", "oip", model_server="sklearn", protocol="v2")
        tensor = {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}
        out = d.infer([tensor])
        self.assertEqual(out["path"], "/v2/models/oip/infer")
        self.assertEqual(out["received"], {"inputs": [tensor]})

    def test_chat_completions_on_an_llm(self) -> None:
        out = dep("demo", "chat", model_server="llm").chat_completions(
            messages=[{"role": "user", "content": "hello"}]
        )
        self.assertEqual(out["choices"][0]["message"]["content"], "echo: hello")
        self.assertEqual(out["model"], "chat")

    def test_openai_client_kwargs_work_as_the_openai_sdk_uses_them(self) -> None:
        d = dep("demo", "chat", model_server="llm")
        kwargs = d.openai_client_kwargs()
        self.assertEqual(kwargs["base_url"], f"{F['gatewayUrl']}/v1/demo/chat/v1")
        self.assertEqual(kwargs["api_key"], F["key"])
        # What the SDK sends: POST {base_url}/chat/completions with "Authorization: Bearer <api_key>".
        req = urllib.request.Request(
            kwargs["base_url"] + "/chat/completions",
            data=json.dumps({"model": "chat", "messages": [{"role": "user", "content": "sdk"}]}).encode(),
            headers={"Authorization": f"Bearer {kwargs['api_key']}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as res:
            self.assertEqual(json.load(res)["choices"][0]["message"]["content"], "echo: sdk")
        try:
            from openai import OpenAI  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return  # the SDK is not installed here: the request above is what it would send
        client = OpenAI(**kwargs, max_retries=0)
        out = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(out.choices[0].message.content, "echo: hi")

    def test_request_calls_any_method_and_path_of_a_python_deployment(self) -> None:
        d = dep("demo", "echo", type="python", headers={"x-team": "fraud"})
        self.assertEqual(d.get_endpoint_url(), f"{F['gatewayUrl']}/v1/demo/echo")
        res = d.request("PATCH", "/predict?debug=1", data=b"abc")
        body = res.json()
        self.assertEqual((body["method"], body["path"], body["bodyLength"]), ("PATCH", "/predict?debug=1", 3))
        self.assertEqual(body["headers"]["x-team"], "fraud")
        self.assertEqual(body["headers"]["x-servegate-project"], "demo")
        self.assertNotIn("authorization", body["headers"])
        self.assertTrue(res.ok)
        self.assertTrue(res.request_id)
        res = d.request("POST", "echo", json={"x": [1, 2]}, params={"q": "a b"})
        body = res.json()
        self.assertEqual((body["method"], body["path"]), ("POST", "/echo?q=a+b"))
        self.assertEqual(body["headers"]["content-type"], "application/json")
        self.assertEqual(body["bodyLength"], len(b'{"x":[1,2]}'))
        for method in ("GET", "PUT", "DELETE", "OPTIONS"):
            with self.subTest(method):
                self.assertEqual(d.request(method, "/any/path").json()["method"], method)
        self.assertEqual(d.request("HEAD", "/x").status, 200)
        self.assertEqual(d.request("PUT", "/bytes", data=bytes(range(256))).content, bytes(range(256)))

    def test_request_works_on_the_other_kinds_too(self) -> None:
        models = dep("demo", "chat", model_server="llm").request("GET", "/v1/models").json()
        self.assertEqual(models["data"][0]["id"], "tiny-llm")
        out = dep("demo", "iris", model_server="python").request("POST", "/v1/models/iris:predict", json={"instances": [[1]]})
        self.assertEqual(out.json()["verb"], "predict")

    def test_a_python_servers_own_error_status(self) -> None:
        d = dep("demo", "echo", type="python")
        res = d.request("GET", "/status/418", raise_on_error=False)
        self.assertEqual((res.status, res.ok), (418, False))
        err = raised(lambda: d.request("GET", "/status/418"))
        self.assertEqual(err.status, 418)
        self.assertIsNone(err.code)
        self.assertIn('"backend":"python"', err.body)


@needs_gateway
class GatewayErrorTests(unittest.TestCase):
    """Every error the gateway answers, and the two without an answer, as GatewayError."""

    def check(self, err: GatewayError, status: Any, code: Any = None) -> None:
        self.assertEqual(err.status, status, err)
        self.assertEqual(err.code, code, err)
        self.assertTrue(err.message, err)
        self.assertNotRegex(err.message, r"^HTTP \d")  # the gateway's own words, not a fallback
        if status is not None:
            self.assertTrue(err.request_id, err)
            self.assertEqual(str(err), f"HTTP {status}: {err.message}")

    def test_401_for_a_wrong_key(self) -> None:
        wrong = "AAAAAAAAAAAAAAAA." + "w" * 40
        err = raised(lambda: dep("fraud_detection", "fraud", model_server="sklearn", api_key=wrong).predict([[1]]))
        self.check(err, 401)
        self.assertEqual(json.loads(err.body), {"error": err.message})  # KServe dialect

    def test_401_for_a_malformed_key(self) -> None:
        err = raised(lambda: dep("demo", "echo", type="python", api_key="not-a-key").request("GET", "/"))
        self.check(err, 401)
        self.assertEqual(err.headers.get("www-authenticate"), "ApiKey")

    def test_403_for_a_key_of_another_project(self) -> None:
        err = raised(
            lambda: dep("fraud_detection", "fraud", model_server="sklearn", api_key=F["otherProjectKey"]).predict([[1]])
        )
        self.check(err, 403)

    def test_404_for_an_unknown_deployment(self) -> None:
        self.check(raised(lambda: dep("demo", "nope", model_server="sklearn").predict([[1]])), 404)

    def test_404_for_a_verb_the_server_does_not_offer(self) -> None:
        d = dep("fraud_detection", "fraud", model_server="sklearn")
        err = raised(lambda: d.request("POST", "/v1/models/fraud:classify", json={"instances": [[1]]}))
        self.check(err, 404)
        self.assertIn("predict", err.message)

    def test_400_for_a_body_without_instances_or_inputs(self) -> None:
        d = dep("demo", "mnist", model_server="tensorflow", model_name="digits")
        err = raised(lambda: d.request("POST", "/v1/models/digits:predict", json={"nothing": True}))
        self.check(err, 400)
        self.assertTrue(err.body.startswith('{"error":"'))

    def test_400_for_a_body_that_is_not_json(self) -> None:
        d = dep("fraud_detection", "fraud", model_server="sklearn")
        err = raised(
            lambda: d.request("POST", "/v1/models/fraud:predict", data=b"{", headers={"content-type": "application/json"})
        )
        self.check(err, 400)

    def test_413_for_a_body_too_large(self) -> None:
        d = dep("demo", "echo", type="python")
        err = raised(lambda: d.request("POST", "/upload", data=b"x" * (F["maxRequestBodyBytes"] + 1)))
        self.check(err, 413)

    def test_openai_dialect_errors_give_message_type_and_code(self) -> None:
        d = dep("demo", "chat", model_server="llm", api_key=F["otherProjectKey"])
        err = raised(lambda: d.chat_completions(messages=[{"role": "user", "content": "x"}]))
        self.check(err, 403, "project_forbidden")
        self.assertEqual(err.type, "permission_error")
        self.assertEqual(json.loads(err.body)["error"]["message"], err.message)

    def test_429_with_retry_after_on_a_rate_limited_llm(self) -> None:
        d = dep("demo", "limited", model_server="llm")
        messages = [{"role": "user", "content": "x"}]
        d.chat_completions(messages=messages)  # the one request of this minute
        err = raised(lambda: d.chat_completions(messages=messages))
        self.check(err, 429, "rate_limit_exceeded")
        self.assertEqual(err.type, "rate_limit_error")
        self.assertGreater(int(err.headers["retry-after"]), 0)

    def test_502_when_the_backend_refuses_the_connection(self) -> None:
        self.check(raised(lambda: dep("demo", "broken", type="python").request("GET", "/")), 502)

    def test_504_when_the_backend_does_not_answer_in_time(self) -> None:
        self.check(raised(lambda: dep("demo", "slow", type="python").request("GET", "/")), 504)

    def test_a_timeout_has_no_status(self) -> None:
        d = dep("demo", "sleepy", type="python", timeout=0.5)
        err = raised(lambda: d.request("GET", "/"))
        self.check(err, None, "timeout")
        self.assertIn("within 0.5 s", err.message)

    def test_a_connection_failure_has_no_status(self) -> None:
        d = Deployment(gateway_url=F["closedUrl"], project="demo", deployment="iris", model_server="sklearn",
                       api_key=F["key"], timeout=5)
        err = raised(lambda: d.predict([[1]]))
        self.check(err, None, "connection_error")
        self.assertIn(F["closedUrl"], err.message)
        self.assertEqual(err.body, "")
