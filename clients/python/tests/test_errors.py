"""GatewayError's message, type and code from every error shape the gateway and common servers answer with: the same
table the TypeScript client's errorMessage() is tested with."""

from __future__ import annotations

import json
import unittest

from servegate import GatewayError
from servegate._errors import error_message


class ErrorMessageTests(unittest.TestCase):
    def test_error_shapes(self) -> None:
        cases = [
            ("KServe dialect", 403, json.dumps({"error": "key not granted"}), ("key not granted", None, None)),
            (
                "OpenAI dialect",
                429,
                json.dumps({"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded", "param": None}}),
                ("slow down", "rate_limit_error", "rate_limit_exceeded"),
            ),
            ("OpenAI dialect, numeric code", 500, json.dumps({"error": {"message": "m", "code": 500}}), ("m", None, "500")),
            ("OpenAI dialect, null code", 404, json.dumps({"error": {"message": "m", "type": "t", "code": None}}), ("m", "t", None)),
            ("a message member", 500, json.dumps({"message": "boom"}), ("boom", None, None)),
            ("FastAPI's detail", 422, json.dumps({"detail": "bad field"}), ("bad field", None, None)),
            ("an empty error string falls through", 400, json.dumps({"error": "", "message": "m"}), ("m", None, None)),
            ("plain text", 502, "upstream broke\n", ("upstream broke", None, None)),
            ("an HTML page", 502, "<html><body>Bad Gateway</body></html>", ("HTTP 502 Bad Gateway", None, None)),
            ("a long text", 500, "x" * 501, ("HTTP 500 Internal Server Error", None, None)),
            ("nothing", 503, "", ("HTTP 503 Service Unavailable", None, None)),
            ("a JSON list", 400, "[1, 2]", ("[1, 2]", None, None)),
        ]
        reasons = {502: "Bad Gateway", 500: "Internal Server Error", 503: "Service Unavailable"}
        for name, status, body, expected in cases:
            with self.subTest(name):
                self.assertEqual(error_message(status, body, reasons.get(status, "")), expected)

    def test_no_reason(self) -> None:
        self.assertEqual(error_message(418, ""), ("HTTP 418", None, None))

    def test_gateway_error(self) -> None:
        err = GatewayError("m", status=404, code="not_found", headers={"X-Request-Id": "r"}, url="http://gw/x")
        self.assertEqual(str(err), "HTTP 404: m")
        self.assertEqual(err.headers, {"x-request-id": "r"})
        self.assertIn("status=404", repr(err))
        self.assertIsInstance(err, Exception)
        no_answer = GatewayError("no answer from http://gw/x within 1 s", code="timeout")
        self.assertIsNone(no_answer.status)
        self.assertEqual(str(no_answer), "no answer from http://gw/x within 1 s")
