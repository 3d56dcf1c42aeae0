"""One HTTP exchange with urllib.request: the whole answer read, any status returned as a Response, redirects not
followed (the key must never go to another host), and timeouts and connection failures turned into GatewayError."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from email.message import Message
from typing import Any, Dict, Mapping, Optional

from ._errors import CONNECTION_ERROR, MAX_ERROR_BODY, TIMEOUT, GatewayError, error_message


class Response:
    """An answer from a deployment, as ``Deployment.request()`` returns it.

    Attributes:
        status: the HTTP status.
        reason: the status line's reason phrase.
        headers: the headers; ``headers.get("content-type")`` is case-insensitive, ``headers.get_all(name)`` gives
            every value of a repeated header.
        content: the body, bytes.
        url: the URL that was called.
    """

    def __init__(self, status: int, reason: str, headers: Message, content: bytes, url: str) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content = content
        self.url = url

    @property
    def ok(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        """The body decoded with the charset of its content-type (UTF-8 when none is named)."""
        charset = self.headers.get_content_charset() or "utf-8"
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            return self.content.decode("utf-8", errors="replace")

    @property
    def request_id(self) -> Optional[str]:
        """The gateway's x-request-id."""
        return self.headers.get("x-request-id")

    def json(self) -> Any:
        """The body parsed as JSON (ValueError when it is not JSON)."""
        return json.loads(self.content.decode("utf-8-sig") if self.content else "null")

    def error(self) -> GatewayError:
        """The GatewayError this answer stands for (whatever its status)."""
        body = self.content[:MAX_ERROR_BODY].decode("utf-8", errors="replace")
        message, typ, code = error_message(self.status, body, self.reason)
        return GatewayError(
            message,
            status=self.status,
            code=code,
            type=typ,
            body=body,
            url=self.url,
            request_id=self.request_id,
            headers=dict(self.headers.items()),
        )

    def raise_for_status(self) -> None:
        """Raises GatewayError unless the status is 2xx."""
        if not self.ok:
            raise self.error()

    def __repr__(self) -> str:
        return f"<Response [{self.status}] {self.url}>"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is returned as it is: following it would send the key wherever the Location points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def make_opener(ssl_context: Optional[ssl.SSLContext] = None) -> urllib.request.OpenerDirector:
    handlers: list = [_NoRedirects()]
    if ssl_context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
    return urllib.request.build_opener(*handlers)


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _is_timeout(err: BaseException) -> bool:
    return isinstance(err, socket.timeout) or (
        isinstance(err, urllib.error.URLError) and isinstance(err.reason, socket.timeout)
    )


def send(
    opener: urllib.request.OpenerDirector,
    method: str,
    url: str,
    body: Optional[bytes],
    headers: Mapping[str, str],
    timeout: Optional[float],
) -> Response:
    """Sends one request and reads the whole answer. Any HTTP status is returned; no answer raises GatewayError."""
    req = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    kwargs: Dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    try:
        try:
            with opener.open(req, **kwargs) as res:
                return Response(res.status, res.reason or "", res.headers, res.read(), url)
        except urllib.error.HTTPError as err:  # any non-2xx answer (urllib raises for them)
            with err:
                content = err.read() if err.fp is not None else b""
            headers_ = err.headers if err.headers is not None else Message()
            return Response(err.code, str(err.reason or ""), headers_, content, url)
    except GatewayError:
        raise
    except Exception as err:  # noqa: BLE001 - every way an exchange can fail becomes one GatewayError
        if _is_timeout(err):
            raise GatewayError(
                f"no answer from {url} within {timeout:g} s" if timeout is not None else f"{url} timed out",
                code=TIMEOUT,
                url=url,
            ) from err
        if isinstance(err, urllib.error.URLError):
            reason = err.reason
            detail = str(reason) if reason else str(err)
            raise GatewayError(f"cannot reach {_origin(url)}: {detail}", code=CONNECTION_ERROR, url=url) from err
        if isinstance(err, (http.client.HTTPException, OSError)):
            detail = str(err) or type(err).__name__
            raise GatewayError(
                f"the connection to {_origin(url)} broke: {type(err).__name__}: {detail}",
                code=CONNECTION_ERROR,
                url=url,
            ) from err
        raise
