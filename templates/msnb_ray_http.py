"""The HTTP side of the adapter's doors, the router's and each model replica's own (msnb.engines.ray.front sends a
prediction straight to a replica of its model): one prediction's way through either door, request bodies decoded
and answers encoded as a TorchServe worker does, TorchServe's error shape and the body size limit, each once.

Depends on starlette and the standard library (the guard for the limit), never on msnb.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

if __package__:  # msnb.templates.msnb_ray_http (the notebook's engine)
    from . import msnb_ray_guard as guard
else:  # beside its model folders (an exported application)
    import msnb_ray_guard as guard

JSON_TYPE = "application/json"
TARGETS_PATH = "/-/msnb-targets"  # the router's answer to the local front: which replica ports serve which route
OWN_API = "-"  # /predictions/NAME/-/v1/...: model NAME's own replica answers OpenAI's API for it (the front's way)


def model_route(name: str) -> str:
    """The route prefix of a model whose replicas answer its predictions themselves (msnb_ray.direct_route)."""
    return f"/predictions/{name}"


def version_app(name: str, version: str) -> str:
    """The application of a version of model ``name`` served beside its default version (whose application is
    ``name``), at ``model_route(name)/VERSION``: the local engine's management API serves other versions so."""
    return f"{name}@{version}"


def is_version_app(app: str) -> bool:
    """Whether application ``app`` serves another version of a model (``version_app``: a name holds no '@')."""
    return "@" in app


def own_api_path(name: str, path: str) -> str:
    """Where the front sends ``path`` (``/v1/chat/completions``...) of a request for model ``name``."""
    return f"{model_route(name)}/{OWN_API}{path}"


Reply = tuple[int, dict, bytes]  # status, headers, body


class Door:
    """What a door asks of every request: the inference key (None: no check) and the body size limit (None: no
    limit), from a builder's args (``key_file`` / ``auth`` / ``max_request_size``: see msnb_ray.router)."""

    def __init__(self, args: dict):
        self.key = guard.inference_key(args)
        limit = args.get("max_request_size")
        self.limit = int(limit) if limit else None


def error_reply(status: int, kind: str, message: str) -> Reply:
    """An error in TorchServe's frontend shape: {"code", "type", "message"}."""
    body = {"code": status, "type": kind, "message": message}
    return status, {"content-type": JSON_TYPE}, json.dumps(body).encode()


def not_found(path: str) -> Response:
    return reply(*error_reply(404, "ResourceNotFoundException", f"Requested resource is not found: {path}"))


def reply(status: int, headers: dict, body: bytes) -> Response:
    return Response(content=body, status_code=status, headers=headers)


async def read_body(request: Request, headers: dict, limit: int | None) -> bytes | tuple[int, str, str]:
    """The request body, or the 413 refusal once it is over ``limit`` (read no further than the limit)."""
    declared = headers.get("content-length", "")
    refusal = guard.too_large(int(declared), limit) if declared.isdigit() else None
    if refusal:
        return refusal
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        refusal = guard.too_large(len(body), limit)
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


def lower(headers: Any) -> dict:
    return {k.lower(): v for k, v in headers.items()}


def decode_body(body: bytes, content_type: str) -> Any:
    """A request body as a TorchServe worker hands it to ``handle``: JSON decoded, text as str, else bytes."""
    if content_type.startswith(JSON_TYPE):
        try:
            return json.loads(body.decode("utf-8"))
        except Exception:  # RecursionError (a deeply nested body) included, as TorchServe's worker catches
            return body  # TorchServe forwards a body it cannot decode as it is
    if content_type.startswith("text"):
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            return body
    return body


def encode_answer(answer: Any, status: int, headers: dict) -> Reply:
    """One answer with the status and headers its request processor holds; JSON unless str/bytes."""
    headers = {k.lower(): str(v) for k, v in headers.items()}
    if isinstance(answer, (bytes, bytearray)):
        headers.setdefault("content-type", "application/octet-stream")
        return status, headers, bytes(answer)
    if isinstance(answer, str):
        headers.setdefault("content-type", "text/plain; charset=utf-8")
        return status, headers, answer.encode()
    try:
        body = json.dumps(answer, allow_nan=False).encode()
    except (TypeError, ValueError) as err:
        return error_reply(503, "InternalServerException", f"the answer is not strict JSON: {err}")
    headers.setdefault("content-type", JSON_TYPE)
    return status, headers, body


def prediction_error(err: BaseException) -> Reply | None:
    """TorchServe's answer to ``PredictionException(message, code)`` raised by ``handle``: that status and message,
    type InternalServerException, for every request of the batch (None for any other exception). By name, so that
    the adapter needs no ``ts``."""
    code = getattr(err, "error_code", None)
    if type(err).__name__ != "PredictionException" or not isinstance(code, int):
        return None
    return error_reply(code, "InternalServerException", str(getattr(err, "message", err)))


def failed(what: str, err: BaseException) -> Reply:
    return error_reply(503, "InternalServerException", f"{what} failed: {type(err).__name__}: {err}")
