"""One HTTP exchange with urllib.request: any status returned as a Response (a 2xx answer read whole, any other its
first 64 KiB), redirects not followed (the key must never go to another host), one deadline over the whole exchange,
and timeouts, connection failures and malformed answers turned into GatewayError. Proxies come from the environment
(http_proxy, https_proxy, no_proxy) as urllib's default ProxyHandler reads them."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from email.message import Message
from typing import Any, Callable, List, Optional

from ._errors import CONNECTION_ERROR, MAX_ERROR_BODY, TIMEOUT, GatewayError, error_message

#: The deadline of a whole exchange when the Deployment and the call name none: connect, send, and read the answer.
DEFAULT_TIMEOUT = 60.0
# Bytes read at a time.
_CHUNK = 64 * 1024


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
        """The body parsed as JSON: ValueError when it is not JSON (nested too deeply for Python's parser included)."""
        try:
            return json.loads(self.content.decode("utf-8-sig") if self.content else "null")
        except RecursionError:
            raise ValueError("the body is nested too deeply to parse as JSON") from None

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


class _Exchange:
    """The deadline of one exchange. A socket timeout bounds each read, not their sum (a server sending one byte every
    half second never trips it), so a timer shuts the connection's socket down when the deadline passes, whatever the
    exchange is doing then: connecting through a proxy, the TLS handshake, sending, or reading the head or the body."""

    def __init__(self, timeout: Optional[float]) -> None:
        self.timeout = timeout
        self.expired = False
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._done = False
        self._timer: Optional[threading.Timer] = None
        if timeout is not None:
            self._timer = threading.Timer(timeout, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def remaining(self) -> Optional[float]:
        if self._deadline is None:
            return None
        return max(self._deadline - time.monotonic(), 0.001)

    def connector(self, create: Callable[..., socket.socket]) -> Callable[..., socket.socket]:
        """Wraps the connection's socket.create_connection so that the timer can reach the socket: a duplicate of its
        descriptor, which stays valid when ssl wraps (and detaches) the original."""

        def create_watched(*args: Any, **kwargs: Any) -> socket.socket:
            sock = create(*args, **kwargs)
            with self._lock:
                if not self.expired and not self._done:
                    self._sockets.append(sock.dup())
                    return sock
            sock.close()
            raise socket.timeout("the deadline passed while connecting")

        return create_watched

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def finish(self) -> None:
        with self._lock:
            self._done = True
            sockets, self._sockets = self._sockets, []
        if self._timer is not None:
            self._timer.cancel()
        for sock in sockets:
            sock.close()


def _watched(base: Callable[..., http.client.HTTPConnection], req: urllib.request.Request) -> Callable[..., Any]:
    exchange = getattr(req, "servegate_exchange", None)

    def connection(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = base(host, **kwargs)
        if isinstance(exchange, _Exchange):
            conn._create_connection = exchange.connector(conn._create_connection)  # type: ignore[attr-defined]
        return conn

    return connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched(http.client.HTTPConnection, req), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        kwargs: Any = {"context": self._context}  # type: ignore[attr-defined]
        if hasattr(self, "_check_hostname"):  # Python before 3.12
            kwargs["check_hostname"] = self._check_hostname
        return self.do_open(_watched(http.client.HTTPSConnection, req), req, **kwargs)


def make_opener(ssl_context: Optional[ssl.SSLContext] = None) -> urllib.request.OpenerDirector:
    """urllib's default opener (its ProxyHandler reads http_proxy, https_proxy and no_proxy) without redirects, and
    with connections the deadline can cut."""
    https = _HTTPSHandler() if ssl_context is None else _HTTPSHandler(context=ssl_context)
    return urllib.request.build_opener(_NoRedirects(), _HTTPHandler(), https)


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _is_timeout(err: BaseException) -> bool:
    return isinstance(err, socket.timeout) or (
        isinstance(err, urllib.error.URLError) and isinstance(err.reason, socket.timeout)
    )


def _read(res: Any, limit: Optional[int]) -> bytes:
    """The body, or its first `limit` bytes (the rest is not read: the connection is closed with the answer)."""
    parts: List[bytes] = []
    size = 0
    while limit is None or size < limit:
        chunk = res.read(_CHUNK if limit is None else min(_CHUNK, limit - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def send(
    opener: urllib.request.OpenerDirector,
    method: str,
    url: str,
    body: Optional[bytes],
    headers: Mapping[str, str],
    timeout: Optional[float],
) -> Response:
    """Sends one request and reads the answer within `timeout` seconds in all (None: no deadline). Any HTTP status is
    returned (other than 2xx with the first MAX_ERROR_BODY bytes of its body); no answer, or a malformed one, raises
    GatewayError."""
    req = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    exchange = _Exchange(timeout)
    req.servegate_exchange = exchange  # type: ignore[attr-defined]
    try:
        try:
            remaining = exchange.remaining()
            res: Any = opener.open(req) if remaining is None else opener.open(req, timeout=remaining)
        except urllib.error.HTTPError as err:  # any non-2xx answer (urllib raises for them)
            res = err
        with res:
            if isinstance(res, urllib.error.HTTPError):
                content = _read(res, MAX_ERROR_BODY) if res.fp is not None else b""
                status, reason = res.code, str(res.reason or "")
                answer_headers = res.headers if res.headers is not None else Message()
            else:
                content = _read(res, None)
                status, reason, answer_headers = res.status, res.reason or "", res.headers
        if exchange.expired:  # the timer cut the connection: what was read may look complete
            raise socket.timeout()
        return Response(status, reason, answer_headers, content, url)
    except GatewayError:
        raise
    except Exception as err:  # noqa: BLE001 - every way an exchange can fail becomes one GatewayError
        if exchange.expired or _is_timeout(err):
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
        # Anything else is an answer the standard library could not read (a header it cannot decode, say).
        raise GatewayError(
            f"the answer from {_origin(url)} is malformed: {type(err).__name__}: {err}",
            code=CONNECTION_ERROR,
            url=url,
        ) from err
    finally:
        exchange.finish()
