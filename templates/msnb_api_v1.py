"""The /v1 routes' protocols in one table: the parser that reads each route's request and the answer that writes it
(chat and text completions: msnb_api_openai and msnb_api_wire; responses: msnb_api_responses). Each engine's front
calls ``parse`` and ``answer`` and knows no route's protocol. Depends only on the standard library and those modules.
"""

from __future__ import annotations

from typing import Any

try:
    from msnb_api_openai import RESPONSES, Request
    from msnb_api_openai import parse as parse_completion
    from msnb_api_responses import ResponseAnswer
    from msnb_api_responses import parse as parse_response
    from msnb_api_wire import Answer
except ImportError:  # imported as msnb.templates.msnb_api_v1
    from .msnb_api_openai import RESPONSES, Request
    from .msnb_api_openai import parse as parse_completion
    from .msnb_api_responses import ResponseAnswer
    from .msnb_api_responses import parse as parse_response
    from .msnb_api_wire import Answer


def parse(kind: str, body: Any) -> Request:
    """The request of route ``kind`` (msnb_api_openai.ROUTES) from its decoded JSON body; ApiError (400) when bad."""
    return parse_response(body) if kind == RESPONSES else parse_completion(kind, body)


def answer(request: Request) -> Answer | ResponseAnswer:
    """The answer that writes ``request``'s protocol (``feed`` pieces, ``close``, ``fail``, ``body``)."""
    return ResponseAnswer(request) if request.kind == RESPONSES else Answer(request)
