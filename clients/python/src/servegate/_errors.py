"""GatewayError: an error answer from the gateway (or from the deployment behind it), a timeout, or a connection that
failed. The message is read from both error dialects the gateway speaks (SPEC §6)."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Tuple

#: At most this much of an error body is kept in GatewayError.body.
MAX_ERROR_BODY = 64 * 1024

#: GatewayError.code when no answer came.
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"


class GatewayError(Exception):
    """An error answered by the gateway or the deployment behind it, or no answer at all.

    Attributes:
        status: the HTTP status (401, 403, 404, 429, 502, 504, ... or the deployment's own), or None when no answer
            came: a timeout (code ``"timeout"``) or a connection that could not be made or broke (code
            ``"connection_error"``).
        message: the gateway's message, read from ``{"error": "..."}`` (KServe dialect), ``{"error": {"message",
            "type", "code"}}`` (OpenAI dialect), ``{"message": ...}`` / ``{"detail": ...}`` (common Python servers),
            else the text of the answer, else ``HTTP <status> <reason>``.
        code: the OpenAI error object's ``code`` (``"rate_limit_exceeded"``, ``"project_forbidden"``, ...) when the
            answer carried one; ``"timeout"`` / ``"connection_error"`` when no answer came; else None.
        type: the OpenAI error object's ``type`` (``"rate_limit_error"``, ...), else None.
        body: the answer's first 64 KiB (the rest is not read), "" when there was none.
        url: the URL that was called.
        request_id: the gateway's ``x-request-id``, to find the request in its logs.
        headers: the answer's headers (lower-case names), e.g. ``retry-after`` on a 429.
    """

    status: Optional[int]
    message: str
    code: Optional[str]
    type: Optional[str]
    body: str
    url: str
    request_id: Optional[str]
    headers: Dict[str, str]

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        type: Optional[str] = None,
        body: str = "",
        url: str = "",
        request_id: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.type = type
        self.body = body
        self.url = url
        self.request_id = request_id
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status is not None else self.message

    def __repr__(self) -> str:
        return f"GatewayError(status={self.status!r}, code={self.code!r}, message={self.message!r}, url={self.url!r})"


def error_message(status: int, body: str, reason: str = "") -> Tuple[str, Optional[str], Optional[str]]:
    """(message, type, code) of an error answer: the same rules as the TypeScript client's errorMessage()."""
    try:
        parsed: Any = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply for Python's parser
        parsed = None
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, str) and err:
            return err, None, None
        if isinstance(err, dict):
            msg = err.get("message")
            if isinstance(msg, str) and msg:
                typ = err.get("type")
                code = err.get("code")
                if isinstance(code, bool) or not isinstance(code, (str, int, float)):
                    code = None
                if isinstance(code, float) and code.is_integer():
                    code = int(code)
                return msg, (typ if isinstance(typ, str) else None), (str(code) if code is not None else None)
        for field in ("message", "detail"):
            value = parsed.get(field)
            if isinstance(value, str) and value:
                return value, None, None
    text = body.strip()
    if text and len(text) <= 500 and not text.startswith("<"):
        return text, None, None
    return (f"HTTP {status} {reason}" if reason else f"HTTP {status}"), None, None
