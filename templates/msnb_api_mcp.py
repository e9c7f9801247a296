"""MCP's streamable HTTP transport, stateless, answered as JSON: every served model is a tool, a call one prediction.

A small JSON-RPC 2.0 implementation of the handshake-era protocol (2024-11-05 to 2025-11-25): ``POST /mcp`` carries
one message; a request is answered with ``application/json``, a notification or a response with 202; ``GET`` and
``DELETE`` get 405 (no server-initiated stream, no session to end). ``step`` reads a message and says what the
engine must do: reply at once, list the tools, or run one prediction; ``tools_reply`` / ``call_reply`` answer it.
The tool of a model is described by its model folder's API card (msnb_names.API_CARD, written at build: the handler's
docstring, the input schema from ``--example`` or ``--schema``, whether it streams). Depends only on the standard
library, never on msnb.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")  # oldest to newest
SERVER = {"name": "msnb", "version": "1"}
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
WRAP_KEY = "input"  # a tool whose sample is not a JSON object takes it as this one argument
ANY_OBJECT = {"type": "object"}


def default_card(name: str) -> dict:
    """The card of a model folder that has none (an archive torch-model-archiver made): any object is its input."""
    return {"description": f"The model {name} (a TorchServe handler).", "input_schema": ANY_OBJECT, "wrapped": False,
            "streams": False}  # fmt: skip


def read_card(text: str | bytes | None, name: str) -> dict:
    """A model folder's card (its API_CARD file's text; None: the default card)."""
    card = default_card(name)
    if text:
        card.update(json.loads(text))
    return card


def tool(name: str, card: dict) -> dict:
    """MCP's Tool for a model: its name, its description, the input schema of its arguments."""
    return {"name": name, "description": card.get("description") or default_card(name)["description"],
            "inputSchema": card.get("input_schema") or ANY_OBJECT}  # fmt: skip


def sample(card: dict, arguments: dict) -> Any:
    """The sample a tool call's arguments stand for (a wrapped input is its one argument)."""
    return arguments.get(WRAP_KEY) if card.get("wrapped") else arguments


@dataclass
class Step:
    """What a message asks: ``reply`` (status, body: answer it as is), ``list`` the tools, or ``call`` one."""

    kind: str
    id: Any = None
    status: int = 200
    body: dict | None = None
    name: str = ""
    arguments: dict = field(default_factory=dict)


def result(id: Any, value: dict) -> dict:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}


def step(raw: bytes) -> Step:
    """One POSTed message read: what to do with it."""
    try:
        message = json.loads(raw or b"null")
    except ValueError as err:
        return Step("reply", status=400, body=error(None, PARSE_ERROR, f"Parse error: {err}"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return Step("reply", status=400, body=error(None, INVALID_REQUEST, "Invalid Request: one JSON-RPC 2.0 "
                                                    "message per POST (batches are not part of MCP since 2025-06-18)"))  # fmt: skip
    method, id = message.get("method"), message.get("id")
    if method is None or id is None:  # a response or a notification (notifications/initialized): nothing to say
        return Step("reply", status=202)
    params = message.get("params") or {}
    if method == "initialize":
        return Step("reply", id, body=result(id, initialized(params.get("protocolVersion"))))
    if method == "ping":
        return Step("reply", id, body=result(id, {}))
    if method == "tools/list":
        return Step("list", id)
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return Step("reply", id, body=error(id, INVALID_PARAMS, "tools/call needs a tool name and an arguments "
                                                "object"))  # fmt: skip
        return Step("call", id, name=name, arguments=arguments)
    return Step("reply", id, body=error(id, METHOD_NOT_FOUND, f"Method not found: {method}"))


def initialized(asked: Any) -> dict:
    """The initialize result: the client's protocol version when it is one of VERSIONS, else the newest."""
    version = asked if asked in VERSIONS else VERSIONS[-1]
    return {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}}, "serverInfo": SERVER,
            "instructions": "Each tool is a model served by msnb; a call runs one prediction."}  # fmt: skip


def tools_reply(id: Any, tools: list[dict]) -> dict:
    return result(id, {"tools": tools})


def unknown_tool(id: Any, name: str, names: list[str]) -> dict:
    return error(id, INVALID_PARAMS, f"Unknown tool: {name} (tools: {', '.join(names) or 'none'})")


def call_reply(id: Any, answer: Any, failed: bool = False) -> dict:
    """A tools/call result: the answer as text and as structured content (an object; other values under
    ``result``); ``failed``: the model's error, as a tool error the agent can read."""
    text = answer if isinstance(answer, str) else json.dumps(answer)
    value: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": failed}
    if not failed:
        value["structuredContent"] = answer if isinstance(answer, dict) else {"result": answer}
    return result(id, value)


def encoded(body: dict | None) -> bytes:
    return json.dumps(body).encode() if body is not None else b""


NOT_ALLOWED = (405, {"allow": "POST"}, b"")  # GET (no server-initiated stream) and DELETE (no session)
