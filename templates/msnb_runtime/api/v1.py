"""The /v1 routes' protocols in one table: the parser that reads each route's request and the answer that writes it
(chat and text completions: api.openai and api.wire; responses: api.responses); and a request a front
refuses before reading it (too large, malformed), answered in the shape of the protocol its path asks. Each engine's
front calls ``parse``, ``answer`` and ``refused`` and knows no route's protocol. Depends only on the standard library
and those modules.
"""

from __future__ import annotations

from typing import Any

from . import hosts, mcp
from .openai import RESPONSES, ApiError, Request
from .openai import parse as parse_completion
from .responses import ResponseAnswer
from .responses import parse as parse_response
from .wire import Answer


def parse(kind: str, body: Any) -> Request:
    """The request of route ``kind`` (api.openai.ROUTES) from its decoded JSON body; ApiError (400) when bad."""
    return parse_response(body) if kind == RESPONSES else parse_completion(kind, body)


def answer(request: Request) -> Answer | ResponseAnswer:
    """The answer that writes ``request``'s protocol (``feed`` pieces, ``close``, ``fail``, ``body``)."""
    return ResponseAnswer(request) if request.kind == RESPONSES else Answer(request)


HINTS = {
    403: hosts.HINT,
    413: "send less per request, or raise the server's max_request_size",
    400: "send one well-formed HTTP/1.1 request (the official clients do)",
}


def refused(path: str, status: int, message: str) -> tuple[int, dict, bytes] | None:
    """A refusal before the request was read whole, for a /v1 path in OpenAI's error shape and for /mcp as a JSON-RPC
    error, each with a hint; None for any other path (TorchServe's own shape is the front's)."""
    said = f"{message}. Hint: {HINTS.get(status, HINTS[400])}."
    if path.startswith("/v1/"):
        err = ApiError(status, said, code="request_too_large" if status == 413 else None)
        return status, err.headers(), err.encoded()
    if path == "/mcp":
        return status, {"content-type": "application/json"}, mcp.encoded(mcp.error(None, mcp.INVALID_REQUEST, said))
    return None
