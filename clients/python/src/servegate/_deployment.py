"""The Deployment class: the URLs of a deployment behind a servegate gateway, in exactly the formats the gateway and
the TypeScript client use (SPEC §2, §3), and requests to it with the API key."""

from __future__ import annotations

import json as _json
import math
import re
import ssl
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from . import _http
from ._errors import MAX_ERROR_BODY, GatewayError
from ._http import Response
from ._version import __version__

#: Every model server, in the order messages list them.
MODEL_SERVERS: Tuple[str, ...] = ("python", "sklearn", "tensorflow", "llm")

# Other spellings of the model servers (the interface description's names, KServe's formats): as the TS client.
_SERVER_ALIASES = {"scikit-learn": "sklearn", "scikit_learn": "sklearn", "tf": "tensorflow", "vllm": "llm"}
# Project and deployment names as the TS client accepts them (a URL path segment).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
# Model names in /v1/models/<name>:<verb> (src/routing/names.ts MODEL_NAME).
_MODEL_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
# An HTTP token (RFC 9110): methods and header names.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_STANDARD_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
# Characters left as they are in request() paths; everything else is percent-encoded (UTF-8).
_PATH_SAFE = "/?&=%:@!$'()*+,;~-._[]"
_VERBS = {"python": ("predict",), "sklearn": ("predict",), "tensorflow": ("predict", "classify", "regress"), "llm": ()}


class _Unset:
    """The default of ``timeout``: the Deployment's own (for a call), DEFAULT_TIMEOUT (for a Deployment)."""

    def __repr__(self) -> str:
        return "<default>"


_UNSET: Any = _Unset()


def _check_timeout(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type_name(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"timeout must be a positive number of seconds (or None: no deadline), got {value!r}")
    return float(value)


def _normalize_server(value: Any) -> Optional[str]:
    if not isinstance(value, str):
        return None
    key = value.strip().lower()
    return key if key in MODEL_SERVERS else _SERVER_ALIASES.get(key)


def _to_json(value: Any) -> Any:
    # NumPy arrays and scalars (and array.array) have tolist(): send them as the lists and numbers they hold.
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encode_json(value: Any, what: str) -> bytes:
    try:
        text = _json.dumps(value, allow_nan=False, default=_to_json, ensure_ascii=False, separators=(",", ":"))
    except ValueError as err:
        raise ValueError(f"{what} cannot be sent as JSON: {err} (NaN and infinity are not JSON)") from None
    except TypeError as err:
        raise TypeError(f"{what} cannot be sent as JSON: {err}") from None
    return text.encode("utf-8")


def _check_headers(headers: Any, what: str) -> Dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise TypeError(f"{what} must be a mapping of header names to values, got {type(headers).__name__}")
    out: Dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ValueError(f"{what}: {name!r} is not a header name")
        if not isinstance(value, str):
            raise TypeError(f"{what}: the value of {name} must be a str, got {type(value).__name__}")
        if re.search(r"[\r\n\x00]", value):
            raise ValueError(f"{what}: the value of {name} contains a line break or NUL")
        if name.lower() == "authorization":
            raise ValueError(f"{what}: authorization is set by the client itself from api_key")
        out[name] = value
    return out


class Deployment:
    """A deployment behind a servegate gateway: ``{gateway_url}/v1/<project>/<deployment>``.

    Args:
        gateway_url: the gateway's public URL, e.g. ``https://models.example.com`` (a trailing slash is ignored, a
            path prefix is kept).
        project: the project as written (``fraud_detection``) or in its namespace form (``fraud-detection``).
        deployment: the deployment's name.
        api_key: the key ``<prefix>.<secret>``; every request carries ``authorization: ApiKey <key>``.
        model_server: for model deployments: ``python``, ``sklearn``, ``tensorflow`` or ``llm`` (also
            ``scikit-learn``, ``tf``, ``vllm``; any case).
        model_name: predictive models: the name in ``/v1/models/<name>:predict``; default the deployment name. LLM
            deployments: the served model name, the default ``model`` of chat_completions().
        type: ``"model"`` (the default) or ``"python"`` (a Python server: no model_server).
        protocol: predictive models: ``"v1"`` (``:predict``, the default) or ``"v2"`` (Open Inference Protocol:
            infer()).
        timeout: the deadline of each request, in seconds, over the whole exchange: connecting (through a proxy),
            sending, and reading the whole answer. Default 60 (``servegate.DEFAULT_TIMEOUT``); None: no deadline (a
            silent server is waited for for ever). Each call takes ``timeout=`` too, for that call alone.
        headers: extra headers on every request.
        ssl_context: an ``ssl.SSLContext`` for https gateways (a private CA, say); default Python's own.

    Every bad argument raises TypeError or ValueError naming it. Calls that a deployment's kind does not offer
    (``classify`` on sklearn, ``openai_client_kwargs`` on a predictive model) raise ValueError before any request
    is sent. Answers other than 2xx, timeouts and connection failures raise GatewayError.
    """

    def __init__(
        self,
        *,
        gateway_url: str,
        project: str,
        deployment: str,
        api_key: str,
        model_server: Optional[str] = None,
        model_name: Optional[str] = None,
        type: Optional[str] = None,
        protocol: Optional[str] = None,
        timeout: Optional[float] = _UNSET,
        headers: Optional[Mapping[str, str]] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.gateway_url = self._check_gateway_url(gateway_url)
        for field, value in (("project", project), ("deployment", deployment)):
            if not isinstance(value, str) or not _NAME.fullmatch(value):
                raise ValueError(f"{field} {value!r} must be a name of letters, digits, '_', '.' or '-'")
        self.project = project
        self.deployment = deployment

        dtype = "model" if type is None else type
        if dtype not in ("model", "python"):
            raise ValueError(f'type must be "model" or "python", got {type!r}')
        server = _normalize_server(model_server)
        if dtype == "model":
            if server is None:
                raise ValueError(
                    f"a model deployment needs model_server: one of {', '.join(MODEL_SERVERS)} "
                    f'(or type="python"), got {model_server!r}'
                )
        elif model_server is not None:
            raise ValueError('model_server is only for type "model" (a python deployment runs your own server)')
        self.type: str = dtype
        self.model_server: Optional[str] = server if dtype == "model" else None
        self.kind: str = "python" if dtype == "python" else ("llm" if server == "llm" else "predictive")

        if model_name is not None:
            if self.kind == "python":
                raise ValueError('model_name is for model deployments, not type "python"')
            if not isinstance(model_name, str) or not model_name:
                raise ValueError(f"model_name must be a non-empty str, got {model_name!r}")
            if self.kind == "predictive" and not _MODEL_NAME.fullmatch(model_name):
                raise ValueError(f"model_name {model_name!r} must be a name of letters, digits, '_', '.' or '-'")
        # Predictive: the name in the URL (default the deployment, as the CRD). LLM: the served name, if given.
        self.model_name: Optional[str] = (
            (model_name or deployment) if self.kind == "predictive" else (model_name if self.kind == "llm" else None)
        )

        if protocol is not None and protocol not in ("v1", "v2"):
            raise ValueError(f'protocol must be "v1" or "v2", got {protocol!r}')
        if protocol == "v2" and self.kind != "predictive":
            raise ValueError('protocol "v2" (Open Inference Protocol) is for predictive model servers only')
        self.protocol: Optional[str] = (protocol or "v1") if self.kind == "predictive" else None

        if not isinstance(api_key, str) or not api_key.strip():
            raise ValueError("api_key is required: the key <prefix>.<secret> that `servegate keys create` printed")
        if not _VISIBLE_ASCII.fullmatch(api_key.strip()):
            raise ValueError("api_key contains a space, a control character or a non-ASCII character")
        self._api_key = api_key.strip()

        # Given by the caller: also the OpenAI SDK's timeout (openai_client_kwargs); else the SDK keeps its own.
        self._timeout_given = timeout is not _UNSET
        self.timeout: Optional[float] = _http.DEFAULT_TIMEOUT if timeout is _UNSET else _check_timeout(timeout)
        self._headers = _check_headers(headers, "headers")
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext, got {type_name(ssl_context)}")
        self._opener = _http.make_opener(ssl_context)

    @staticmethod
    def _check_gateway_url(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"gateway_url must be a str, got {type_name(value)}")
        url = value.strip()
        hint = "(expected http(s)://host[:port][/prefix])"
        if not url or re.search(r"[\x00-\x20\x7f]", url):
            raise ValueError(f"gateway_url {value!r} is not a URL {hint}")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError as err:
            raise ValueError(f"gateway_url {value!r} is not a URL: {err}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"gateway_url {value!r} is not an http(s) URL {hint}")
        if "?" in url or "#" in url:
            raise ValueError(f"gateway_url {value!r} must not have a query or fragment")
        if "@" in parts.netloc:
            raise ValueError(f"gateway_url {value!r} must not carry a user or password: api_key is the credential")
        return url.rstrip("/")

    @classmethod
    def from_resource(
        cls,
        resource: Mapping[str, Any],
        *,
        api_key: str,
        gateway_url: Optional[str] = None,
        timeout: Optional[float] = _UNSET,
        headers: Optional[Mapping[str, str]] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> "Deployment":
        """A Deployment from a ServingDeployment as read from the cluster (``kubectl get sdep x -o json``): project,
        names and model server from ``spec``, the gateway URL from ``status.url`` (or ``gateway_url`` when given)."""
        if not isinstance(resource, Mapping):
            raise TypeError(f"resource must be the ServingDeployment as a dict, got {type_name(resource)}")
        metadata, spec, status = (
            part if isinstance(part, Mapping) else {}
            for part in (resource.get("metadata"), resource.get("spec"), resource.get("status"))
        )
        name = metadata.get("name")
        if not name:
            raise ValueError("the resource has no metadata.name")
        project = spec.get("project") if isinstance(spec.get("project"), str) and spec.get("project") else None
        project = project or metadata.get("namespace")
        if not project:
            raise ValueError("the resource has neither spec.project nor metadata.namespace")
        if not gateway_url:
            url = status.get("url") if isinstance(status.get("url"), str) else ""
            suffix = f"/v1/{project}/{name}"
            if not url.endswith(suffix):
                raise ValueError("the resource has no status.url yet: pass gateway_url")
            gateway_url = url[: -len(suffix)]
        python = spec.get("type") == "python"
        return cls(
            gateway_url=gateway_url,
            project=project,
            deployment=name,
            api_key=api_key,
            type="python" if python else "model",
            model_server=None if python else spec.get("modelServer"),
            model_name=spec.get("modelName") if isinstance(spec.get("modelName"), str) else None,
            protocol="v2" if spec.get("protocol") == "v2" else None,
            timeout=timeout,
            headers=headers,
            ssl_context=ssl_context,
        )

    # -------------------------------------------------------------------------------------------------------------
    # URLs
    # -------------------------------------------------------------------------------------------------------------

    def get_base_url(self) -> str:
        """``{gateway_url}/v1/<project>/<deployment>``: the base every other URL starts with."""
        return f"{self.gateway_url}/v1/{self.project}/{self.deployment}"

    def get_inference_url(self) -> Optional[str]:
        """Predictive models: ``{base}/v1/models/<name>:predict`` (V2: ``{base}/v2/models/<name>/infer``); else None."""
        if self.kind != "predictive":
            return None
        if self.protocol == "v2":
            return f"{self.get_base_url()}/v2/models/{self.model_name}/infer"
        return f"{self.get_base_url()}/v1/models/{self.model_name}:predict"

    def get_openai_url(self) -> Optional[str]:
        """LLM deployments: ``{base}/v1``, the OpenAI SDK's base_url; else None."""
        return f"{self.get_base_url()}/v1" if self.kind == "llm" else None

    def get_endpoint_url(self) -> Optional[str]:
        """Python deployments: ``{base}``; else None."""
        return self.get_base_url() if self.kind == "python" else None

    def get_verb_url(self, verb: str) -> str:
        """Predictive models: the URL of ``predict`` (tensorflow also ``classify``, ``regress``)."""
        if self.kind != "predictive":
            raise ValueError(f"{self._describe()} is not a predictive model: it has no :{verb} endpoint")
        if self.protocol == "v2":
            raise ValueError(f"{self._describe()} speaks the Open Inference Protocol (V2): use infer() instead of :{verb}")
        allowed = _VERBS[self.model_server or ""]
        if verb not in allowed:
            offered = ", ".join(f":{v}" for v in allowed)
            raise ValueError(
                f"{self._describe()} (model server {self.model_server}) offers only {offered}; "
                f":{verb} needs a tensorflow model server"
            )
        return f"{self.get_base_url()}/v1/models/{self.model_name}:{verb}"

    # -------------------------------------------------------------------------------------------------------------
    # Requests
    # -------------------------------------------------------------------------------------------------------------

    def predict(
        self, instances: Any = None, *, inputs: Any = None, timeout: Optional[float] = _UNSET, **fields: Any
    ) -> Any:
        """POST ``{"instances": ...}`` or ``{"inputs": ...}`` (exactly one) to ``:predict``; returns the JSON answer.

        Extra keyword arguments are sent as further members of the body (``signature_name="serving_default"``).
        NumPy arrays are sent as the lists they hold. ``timeout``: this call's deadline (default the Deployment's).
        """
        url = self.get_verb_url("predict")
        return self._post_json(url, self._body("predict", fields, instances=instances, inputs=inputs), timeout)

    def classify(
        self,
        examples: Any = None,
        *,
        instances: Any = None,
        inputs: Any = None,
        timeout: Optional[float] = _UNSET,
        **fields: Any,
    ) -> Any:
        """TensorFlow model servers only: POST ``{"examples": ...}`` (or instances / inputs) to ``:classify``."""
        url = self.get_verb_url("classify")
        return self._post_json(
            url, self._body("classify", fields, examples=examples, instances=instances, inputs=inputs), timeout
        )

    def regress(
        self,
        examples: Any = None,
        *,
        instances: Any = None,
        inputs: Any = None,
        timeout: Optional[float] = _UNSET,
        **fields: Any,
    ) -> Any:
        """TensorFlow model servers only: POST ``{"examples": ...}`` (or instances / inputs) to ``:regress``."""
        url = self.get_verb_url("regress")
        return self._post_json(
            url, self._body("regress", fields, examples=examples, instances=instances, inputs=inputs), timeout
        )

    def infer(self, inputs: Any, *, timeout: Optional[float] = _UNSET, **fields: Any) -> Any:
        """V2 (Open Inference Protocol) models: POST ``{"inputs": [...]}`` to ``/v2/models/<name>/infer``."""
        if self.protocol != "v2":
            raise ValueError(f"{self._describe()} does not speak the Open Inference Protocol (V2): use predict()")
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"inputs must be a list of input tensors, got {type_name(inputs)}")
        url = self.get_inference_url()
        assert url is not None
        return self._post_json(url, {"inputs": inputs, **fields}, timeout)

    def chat_completions(self, *, timeout: Optional[float] = _UNSET, **body: Any) -> Any:
        """LLM deployments: POST the keyword arguments as the body of ``{openai_url}/chat/completions``; returns the
        JSON answer. ``model`` defaults to model_name (else the deployment name). Not streamed: use the OpenAI SDK
        with openai_client_kwargs() for streams. ``timeout`` is this call's deadline, not a body member (as in the
        OpenAI SDK)."""
        base = self.get_openai_url()
        if base is None:
            raise ValueError(f"{self._describe()} is not an LLM deployment: it has no /v1/chat/completions")
        if body.get("stream"):
            raise ValueError("chat_completions() does not stream: use openai.OpenAI(**d.openai_client_kwargs())")
        if "messages" not in body:
            raise ValueError('chat_completions() needs messages=[{"role": "user", "content": "..."}]')
        body.setdefault("model", self.model_name or self.deployment)
        return self._post_json(f"{base}/chat/completions", body, timeout)

    def openai_client_kwargs(self) -> Dict[str, Any]:
        """LLM deployments: ``{"base_url": get_openai_url(), "api_key": <key>}`` for ``openai.OpenAI(**kwargs)`` (the
        gateway takes the key as ``Bearer <key>`` too); with ``timeout`` and ``default_headers`` when set."""
        base = self.get_openai_url()
        if base is None:
            raise ValueError(f"{self._describe()} is not an LLM deployment: it has no OpenAI-compatible API")
        kwargs: Dict[str, Any] = {"base_url": base, "api_key": self._api_key}
        if self._timeout_given and self.timeout is not None:
            kwargs["timeout"] = self.timeout
        if self._headers:
            kwargs["default_headers"] = dict(self._headers)
        return kwargs

    def request(
        self,
        method: str,
        path: str = "",
        *,
        json: Any = None,
        data: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        params: Optional[Mapping[str, Any]] = None,
        raise_on_error: bool = True,
        timeout: Optional[float] = _UNSET,
    ) -> Response:
        """Any request relative to the base URL: ``request("POST", "/echo", json={...})`` calls ``{base}/echo``.

        Meant for Python deployments (whose server decides its routes); works for every kind. ``json`` is sent as
        JSON, ``data`` (bytes or str) as it is; ``params`` is added to the query string. Returns the Response;
        a non-2xx answer raises GatewayError unless ``raise_on_error=False`` (its ``content`` then holds the first
        64 KiB of the body: the rest is not read). ``timeout``: this call's deadline (default the Deployment's).
        """
        if not isinstance(method, str) or not _TOKEN.fullmatch(method):
            raise ValueError(f"method must be an HTTP method such as 'GET' or 'POST', got {method!r}")
        if method.upper() in _STANDARD_METHODS:
            method = method.upper()
        url = self.get_base_url() + self._relative(path, params)
        call_headers = _check_headers(headers, "headers")
        if json is not None and data is not None:
            raise ValueError("pass json= or data=, not both")
        body: Optional[bytes] = None
        content_type: Optional[str] = None
        if json is not None:
            body, content_type = _encode_json(json, "json"), "application/json"
        elif data is not None:
            if isinstance(data, str):
                body, content_type = data.encode("utf-8"), "text/plain; charset=utf-8"
            elif isinstance(data, (bytes, bytearray, memoryview)):
                body, content_type = bytes(data), "application/octet-stream"
            else:
                raise TypeError(f"data must be bytes or str, got {type_name(data)} (use json= for objects)")
        if content_type and not any(k.lower() == "content-type" for k in call_headers):
            call_headers["Content-Type"] = content_type
        res = self._send(method, url, body, call_headers, timeout)
        if raise_on_error:
            res.raise_for_status()
        return res

    # -------------------------------------------------------------------------------------------------------------

    @staticmethod
    def _relative(path: Any, params: Optional[Mapping[str, Any]]) -> str:
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, got {type_name(path)}")
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", path) or path.startswith("//"):
            raise ValueError(f"path {path!r} must be relative to the deployment (\"/predict\"), not a full URL")
        if "#" in path:
            raise ValueError(f"path {path!r} must not have a fragment (write a literal '#' as %23)")
        if path and not path.startswith(("/", "?")):
            path = "/" + path
        route = path.split("?", 1)[0]
        if any(seg in (".", "..") for seg in route.split("/")):
            raise ValueError(f"path {path!r} must not contain '.' or '..' segments")
        path = quote(path, safe=_PATH_SAFE)
        if params is not None:
            if not isinstance(params, Mapping):
                raise TypeError(f"params must be a mapping, got {type_name(params)}")
            if params:
                path += ("&" if "?" in path else "?") + urlencode(params, doseq=True)
        return path

    def _body(self, verb: str, fields: Dict[str, Any], **payloads: Any) -> Dict[str, Any]:
        given = {k: v for k, v in payloads.items() if v is not None}
        if len(given) != 1:
            names = " or ".join(f"{k}=" for k in payloads)
            what = "both" if len(given) > 1 else "none"
            raise ValueError(f"{verb}() needs exactly one of {names} (got {what})")
        return {**given, **fields}

    def _post_json(self, url: str, body: Any, timeout: Optional[float]) -> Any:
        payload = _encode_json(body, "the request body")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        res = self._send("POST", url, payload, headers, timeout)
        res.raise_for_status()
        if not res.content:
            return None
        try:
            return res.json()
        except ValueError as err:  # Response.json(): not JSON, not UTF-8, or nested too deeply
            raise GatewayError(
                f"the answer from {url} is not JSON (content-type {res.headers.get('content-type')!r}): {err}",
                status=res.status,
                body=res.content[:MAX_ERROR_BODY].decode("utf-8", errors="replace"),
                url=url,
                request_id=res.request_id,
                headers=dict(res.headers.items()),
            ) from None

    def _send(
        self, method: str, url: str, body: Optional[bytes], headers: Mapping[str, str], timeout: Optional[float]
    ) -> Response:
        merged: Dict[str, Tuple[str, str]] = {"user-agent": ("User-Agent", f"servegate-python/{__version__}")}
        for source in (self._headers, headers):
            for name, value in source.items():
                merged[name.lower()] = (name, value)
        merged["authorization"] = ("Authorization", f"ApiKey {self._api_key}")
        deadline = self.timeout if timeout is _UNSET else _check_timeout(timeout)
        return _http.send(self._opener, method, url, body, dict(merged.values()), deadline)

    def _describe(self) -> str:
        return f"deployment {self.project}/{self.deployment}"

    def __repr__(self) -> str:  # never shows the key
        extra = f", model_server={self.model_server!r}" if self.model_server else ""
        if self.model_name is not None:
            extra += f", model_name={self.model_name!r}"
        if self.protocol == "v2":
            extra += ", protocol='v2'"
        return (
            f"Deployment(gateway_url={self.gateway_url!r}, project={self.project!r}, "
            f"deployment={self.deployment!r}, type={self.type!r}{extra})"
        )


def type_name(value: Any) -> str:
    return type(value).__name__
