"""The HTTP side of the adapter's doors, the router's and each model replica's own (msnb.engines.ray.ingress sends a
prediction straight to a replica of its model): one prediction's way through either door on Starlette, with
TorchServe's checks (msnb_runtime.ts.checks) and its wire format (msnb_runtime.ts.wire).

Depends on starlette and the standard library, never on msnb.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..api import hosts
from ..api.v1 import refused as api_refused
from ..ts.checks import refused, too_large
from ..ts.wire import JSON_TYPE, Reply, error_reply
from . import token_interceptor
from .management import INFERENCE_PATHS, NOT_ALLOWED, NOT_FOUND, api_description

TARGETS_PATH = "/-/msnb-targets"  # the router's answer to the local front: which replica ports serve which route
OWN_API = "-"  # /predictions/NAME/-/v1/...: model NAME's own replica answers OpenAI's API for it (the front's way)
EXPLAIN = "/explanations"  # /predictions/NAME/-/explanations: model NAME's own replica explains (the front's way)


def model_route(name: str) -> str:
    """The route prefix of a model whose replicas answer its predictions themselves (ray.app.direct_route)."""
    return f"/predictions/{name}"


def version_app(name: str, version: str) -> str:
    """The application of a version of model ``name`` served beside its default version (whose application is
    ``name``), at ``model_route(name)/VERSION``: the local engine's management API serves other versions so."""
    return f"{name}@{version}"


def is_version_app(app: str) -> bool:
    """Whether application ``app`` serves another version of a model (``version_app``: a name holds no '@')."""
    return "@" in app


def other_version(name: str, version: str, asked: str | None) -> tuple[int, str, str] | None:
    """TorchServe's 404 for a version ``asked`` (``/predictions/NAME/VERSION``) other than the ``version`` of ``name``
    the replica serves (the front sends it there when no application of that version has the longer route)."""
    if asked is None or asked == version:
        return None
    return 404, "ModelVersionNotFoundException", f"Model version: {asked} does not exist for model: {name}"


@dataclass(frozen=True)
class InferenceCall:
    """A prediction as TorchServe's inference address reads its path: the model, its version (None: the default
    one), whether it explains, and the segments after the version, which TorchServe hands the handler as the request
    header ``url_path``."""

    name: str
    version: str | None = None
    explain: bool = False
    url_path: str = ""

    def headers(self, headers: dict) -> dict:
        return {**headers, "url_path": self.url_path}


def inference_call(path: str) -> InferenceCall | None:
    """``path`` as TorchServe's ``InferenceRequestHandler`` routes it (split as Java's ``String.split``: trailing
    empty segments dropped): ``/predictions/NAME[/VERSION[/MORE...]]``, ``/explanations/...``, KServe v1's
    ``/v1/models/NAME:predict`` (``:explain``) and v2's ``/v2/models/NAME/infer`` (``/explain``), by any method; None
    for any other path, ``/predictions`` without a name included (TorchServe's 404)."""
    parts = path.split("/")
    while parts and not parts[-1]:
        parts.pop()
    if len(parts) >= 3 and parts[1] in ("predictions", "explanations"):
        version = parts[3] if len(parts) > 3 else None
        return InferenceCall(parts[2], version, parts[1] == "explanations", "/".join(parts[4:]))
    if len(parts) == 4 and parts[1:3] == ["v1", "models"] and (":predict" in parts[3] or ":explain" in parts[3]):
        return InferenceCall(parts[3].split(":")[0], explain=":predict" not in parts[3])
    if len(parts) == 5 and parts[1:3] == ["v2", "models"] and parts[4] in ("infer", "explain"):
        return InferenceCall(parts[3].split(":")[0], explain=parts[4] == "explain")
    return None


def description(method: str, path: str) -> Response | None:
    """TorchServe's OpenAPI description of the inference address for ``OPTIONS /`` and ``/api-description`` (any
    method), its 405 for another method on ``/``; None for any other path."""
    if path.strip("/") == "api-description" or (path == "/" and method == "OPTIONS"):
        return reply(200, {"content-type": JSON_TYPE}, json.dumps(api_description(INFERENCE_PATHS)).encode())
    return reply(*error_reply(405, "MethodNotAllowedException", NOT_ALLOWED)) if path == "/" else None


def explained(path: str) -> str | None:
    """The model NAME of ``/explanations/NAME``, else None: the front sends it to NAME's own replica, at
    ``own_api_path(NAME, EXPLAIN)``, which explains behind its own door."""
    parts = path.split("/")
    if len(parts) == 3 and parts[1] == "explanations" and parts[2]:
        return parts[2]
    return None


def own_api_path(name: str, path: str) -> str:
    """Where the front sends ``path`` (``/v1/chat/completions``...) of a request for model ``name``."""
    return f"{model_route(name)}/{OWN_API}{path}"


class IngressConfig:
    """What an ingress (the router's, a model replica's own) asks of every request: the inference key (None: no check) and the body size limit (None: no
    limit), from a builder's args (``key_file`` / ``auth`` / ``max_request_size``: see ray.app.router); ``key_hint``:
    where the key that opens a model is (a shared Ray's, said with a refused key)."""

    def __init__(self, args: dict):
        self.key, self.key_hint = token_interceptor.inference_key(args), args.get("key_hint")
        limit = args.get("max_request_size")
        self.limit = int(limit) if limit else None
        # the Host and Origin it answers: loopback's, and off loopback (``host``) the allowed-hosts list (api.hosts)
        self.hosts = hosts.for_address(args.get("host") or "127.0.0.1", args.get(hosts.ARGS_KEY))

    def forbidden(self, path: str, headers: dict) -> Response | None:
        """403 with a Hint for a request naming another host or sent from a foreign web origin, in the shape of the
        protocol its path asks (/v1: OpenAI's, /mcp: JSON-RPC's, else TorchServe's); None when it may pass."""
        why = self.hosts.refusal(headers.get("host"), headers.get("origin"))
        if why is None:
            return None
        return reply(*(api_refused(path, 403, why) or error_reply(403, hosts.FORBIDDEN, hosts.hinted(why))))


def not_found() -> Response:
    """TorchServe's 404 for a path it does not serve (its words name no path)."""
    return reply(*error_reply(404, "ResourceNotFoundException", NOT_FOUND))


def reply(status: int, headers: dict, body: bytes) -> Response:
    return Response(content=body, status_code=status, headers=headers)


async def read_body(request: Request, headers: dict, limit: int | None) -> bytes | tuple[int, str, str]:
    """The request body, or the 413 refusal once it is over ``limit`` (read no further than the limit)."""
    declared = headers.get("content-length", "")
    refusal = too_large(int(declared), limit) if declared.isdigit() else None
    if refusal:
        return refusal
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        refusal = too_large(len(body), limit)
        if refusal:
            return refusal
    return bytes(body)


async def prediction(
    request: Request,
    headers: dict,
    limit: int | None,
    stream: Callable[[bytes], Awaitable[Response | None]],
    whole: Callable[[bytes], Awaitable[Reply]],
) -> Response:
    """One prediction (or explanation) whose key was checked: the body read within ``limit``, then ``stream(body)``'s
    streamed answer, or, when it gives None, ``whole(body)``'s answer."""
    body = await read_body(request, headers, limit)
    if isinstance(body, tuple):
        return reply(*error_reply(*body))
    streamed = await stream(body)
    if streamed is not None:
        return streamed
    return reply(*await whole(body))


async def explanation(
    request: Request, headers: dict, config: IngressConfig, infer: Callable[[bytes], Awaitable[Reply]]
) -> Response:
    """``/explanations/NAME`` at a replica of NAME (``explained``): its ingress config's key and body limit, then
    ``infer(body)``'s whole answer (an explanation is never streamed)."""
    refusal = refused(headers, config.key)
    return reply(*error_reply(*refusal)) if refusal else await prediction(request, headers, config.limit, _whole, infer)


async def _whole(body: bytes) -> None:
    return None


def lower(headers: Any) -> dict:
    return {k.lower(): v for k, v in headers.items()}


def failed(what: str, err: BaseException) -> Reply:
    return error_reply(503, "InternalServerException", f"{what} failed: {type(err).__name__}: {err}")
