"""MCP's streamable HTTP transport, stateless, answered as JSON: every served model is a tool, a call one prediction.

A small JSON-RPC 2.0 implementation of both eras of the protocol: the handshake era (2024-11-05 to 2025-11-25:
``initialize``, then requests) and the stateless 2026-07-28 revision (no handshake: ``server/discover``, each request
carrying its protocol version in ``params._meta`` and in the ``MCP-Protocol-Version`` and ``Mcp-Method`` headers,
each result its ``resultType``; msnb_api_mcp_modern). ``POST /mcp`` carries one message; a request is answered with
``application/json``, a notification or a response with 202; ``GET`` and ``DELETE`` get 405 (no server-initiated
stream, no session to end). ``step`` reads a message and says what the engine must do: reply at once, list the tools,
or run one prediction; ``tools_reply`` / ``call_reply`` answer it and ``http`` puts the answer on the wire.
The tool of a model is described by its model folder's API card (handler.names.API_CARD, written at build: the handler's
docstring, the input schema from ``--example`` or ``--schema``, whether it streams). Depends only on the standard
library, never on msnb.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")  # the handshake era, oldest to newest
MODERN = ("2026-07-28",)  # the stateless revisions, oldest to newest
SERVER = {"name": "msnb", "version": "1"}
INSTRUCTIONS = "Each tool is a model served by msnb; a call runs one prediction."
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
HEADER_MISMATCH, UNSUPPORTED_VERSION = -32020, -32022
STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}  # a 2026-07-28 error's HTTP status (the handshake era answers 200)
META = "io.modelcontextprotocol/"  # the prefix of the per-request keys in ``params._meta`` (2026-07-28)
VERSION_HEADER, METHOD_HEADER, NAME_HEADER = "mcp-protocol-version", "mcp-method", "mcp-name"
HEADERS = (VERSION_HEADER, METHOD_HEADER, NAME_HEADER)  # what an engine passes to ``step``
WRAP_KEY = "input"  # a tool whose sample is not a JSON object takes it as this one argument
ANY_OBJECT = {"type": "object"}
STREAM_OUTPUT = {
    "type": "object",
    "properties": {"result": {"description": "the joined text pieces (a JSON-lines stream: the list of its values)"}},
    "required": ["result"],
}
JSON_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def default_card(name: str) -> dict:
    """The card of a model folder that has none (an archive torch-model-archiver made): any object is its input."""
    return {
        "description": f"The model {name} (a TorchServe handler).",
        "input_schema": ANY_OBJECT,
        "wrapped": False,
        "streams": False,
    }


def read_card(text: str | bytes | None, name: str) -> dict:
    """A model folder's card (its API_CARD file's text; None: the default card)."""
    card = default_card(name)
    if text:
        card.update(json.loads(text))
    return card


def tool(name: str, card: dict) -> dict:
    """MCP's Tool for a model: its name, its description, the input schema of its arguments, and the schema of its
    structured answer where the card knows it (a streaming model answers ``{"result": ...}``)."""
    found = {
        "name": name,
        "description": card.get("description") or default_card(name)["description"],
        "inputSchema": card.get("input_schema") or ANY_OBJECT,
    }
    output = card.get("output_schema") or (STREAM_OUTPUT if card.get("streams") else None)
    return {**found, "outputSchema": output} if output else found


def sample(card: dict, arguments: dict) -> Any:
    """The sample a tool call's arguments stand for (a wrapped input is its one argument)."""
    return arguments.get(WRAP_KEY) if card.get("wrapped") else arguments


def argument_problem(card: dict, arguments: dict) -> str | None:
    """What is wrong with a call's arguments for the tool's input schema (a required one missing, one of the wrong
    JSON type), with a hint; None when they fit."""
    schema = card.get("input_schema") or ANY_OBJECT
    props = schema.get("properties") or {}
    missing = [n for n in schema.get("required") or () if n not in arguments]
    wrong = [(n, props[n]["type"]) for n in arguments if n in props and _mistyped(arguments[n], props[n].get("type"))]
    if not missing and not wrong:
        return None
    said = [f"`{n}` is missing" for n in missing] + [f"`{n}` must be of type {t}" for n, t in wrong]
    return f"Invalid arguments: {'; '.join(said)}. Hint: the tool's inputSchema names each argument and its type."


def _mistyped(value: Any, kind: Any) -> bool:
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    known = [JSON_TYPES[k] for k in kinds if k in JSON_TYPES]
    if not known:
        return False
    boolean = isinstance(value, bool) and not any(bool in k for k in known)
    return boolean or not any(isinstance(value, k) for k in known)


@dataclass
class Step:
    """What a message asks: ``reply`` (status, body: answer it as is), ``list`` the tools, or ``call`` one.
    ``modern``: the request speaks the stateless revision (its results carry ``resultType``)."""

    kind: str
    id: Any = None
    status: int = 200
    body: dict | None = None
    name: str = ""
    arguments: dict = field(default_factory=dict)
    modern: bool = False


def result(id: Any, value: dict, modern: bool = False) -> dict:
    if modern:
        value = {**value, "resultType": "complete", "_meta": {META + "serverInfo": SERVER}}
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: Any, code: int, message: str, data: Any = None) -> dict:
    found = {"code": code, "message": message, **({"data": data} if data is not None else {})}
    return {"jsonrpc": "2.0", "id": id, "error": found}


def step(raw: bytes, headers: dict[str, str] | None = None) -> Step:
    """One POSTed message read, with its MCP headers (HEADERS, by lower-case name): what to do with it."""
    try:
        message = json.loads(raw or b"null")
    except ValueError as err:
        return Step("reply", status=400, body=error(None, PARSE_ERROR, f"Parse error: {err}"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return Step(
            "reply",
            status=400,
            body=error(
                None,
                INVALID_REQUEST,
                "Invalid Request: one JSON-RPC 2.0 message per POST (batches are not part of MCP since 2025-06-18)",
            ),
        )
    method, id = message.get("method"), message.get("id")
    if method is None or id is None:  # a response or a notification (notifications/initialized): nothing to say
        return Step("reply", status=202)
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
    modern = META + "protocolVersion" in meta or method == "server/discover"
    refused = _modern_problem(method, params, meta, headers or {}) if modern else None
    if refused is not None:
        return Step("reply", id, STATUS.get(refused[0], 200), error(id, *refused), modern=True)
    return _method(method, id, params, modern)


def _method(method: str, id: Any, params: dict, modern: bool) -> Step:
    if method == "initialize" and not modern:
        return Step("reply", id, body=result(id, initialized(params.get("protocolVersion"))))
    if method == "server/discover":
        return Step("reply", id, body=result(id, discovered(), modern), modern=True)
    if method == "ping":
        return Step("reply", id, body=result(id, {}, modern), modern=modern)
    if method == "tools/list":
        return Step("list", id, modern=modern)
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return _refused(id, INVALID_PARAMS, "tools/call needs a tool name and an arguments object", modern)
        return Step("call", id, name=name, arguments=arguments, modern=modern)
    opening = "server/discover" if modern else "initialize"
    said = f"Method not found: {method} (msnb answers {opening}, ping, tools/list and tools/call)"
    return _refused(id, METHOD_NOT_FOUND, said, modern)


def _refused(id: Any, code: int, message: str, modern: bool) -> Step:
    return Step("reply", id, STATUS.get(code, 200) if modern else 200, error(id, code, message), modern=modern)


def _modern_problem(method: str, params: dict, meta: dict, headers: dict) -> tuple | None:
    """Why a stateless (2026-07-28) request is refused: (code, message[, data]), or None."""
    version = meta.get(META + "protocolVersion")
    if not isinstance(version, str) or not isinstance(meta.get(META + "clientCapabilities"), dict):
        return (INVALID_PARAMS, f"params._meta must carry {META}protocolVersion and {META}clientCapabilities")
    if headers.get(VERSION_HEADER) != version or headers.get(METHOD_HEADER) != method:
        return (
            HEADER_MISMATCH,
            f"The {VERSION_HEADER} and {METHOD_HEADER} headers must equal the request's protocol version and method",
        )
    if method == "tools/call" and headers.get(NAME_HEADER) not in (None, params.get("name")):
        return (HEADER_MISMATCH, f"The {NAME_HEADER} header must equal the tool's name")
    if version not in MODERN:
        return (
            UNSUPPORTED_VERSION,
            f"Unsupported protocol version {version} (msnb speaks {', '.join(MODERN)}, and "
            f"{', '.join(VERSIONS)} after initialize)",
            {"supported": list(MODERN), "requested": version},
        )
    return None


def initialized(asked: Any) -> dict:
    """The initialize result: the client's protocol version when it is one of VERSIONS, else the newest."""
    version = asked if asked in VERSIONS else VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": SERVER,
        "instructions": INSTRUCTIONS,
    }


def discovered() -> dict:
    """The server/discover result (2026-07-28): the stateless revisions msnb speaks, its capabilities."""
    return {
        "supportedVersions": list(MODERN),
        "capabilities": {"tools": {"listChanged": False}},
        "instructions": INSTRUCTIONS,
        "cacheScope": "private",
        "ttlMs": 0,
    }


def tools_reply(step: Step, cards: dict[str, dict]) -> dict:
    """The tools/list result: a tool per served model (name -> its card)."""
    listed = {"tools": [tool(n, c) for n, c in cards.items()]}
    return result(step.id, {**listed, "cacheScope": "private", "ttlMs": 0} if step.modern else listed, step.modern)


def unknown_tool(step: Step, names: list[str]) -> dict:
    return error(step.id, INVALID_PARAMS, f"Unknown tool: {step.name} (tools: {', '.join(names) or 'none'})")


def call_reply(step: Step, answer: Any, failed: bool = False) -> dict:
    """A tools/call result: the answer as text and as structured content (an object; other values under
    ``result``); ``failed``: the model's error (its cause and hint), as a tool error the agent can read."""
    text = answer if isinstance(answer, str) else json.dumps(answer)
    value: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": failed}
    if not failed:
        value["structuredContent"] = answer if isinstance(answer, dict) else {"result": answer}
    return result(step.id, value, step.modern)


def http(step: Step, body: dict) -> tuple[int, dict, bytes]:
    """The HTTP answer to a list or call step: its status (a stateless request's error has its own), JSON."""
    status = STATUS.get(body.get("error", {}).get("code"), 200) if step.modern else 200
    return status, {"content-type": "application/json"}, encoded(body)


def unauthorised(message: str, challenge: str) -> tuple[int, dict, bytes]:
    """A missing or wrong key: 401 with the bearer challenge, the hint in a JSON-RPC error the clients show."""
    headers = {"content-type": "application/json", "www-authenticate": challenge}
    return 401, headers, encoded(error(None, INVALID_REQUEST, message))


def encoded(body: dict | None) -> bytes:
    return json.dumps(body).encode() if body is not None else b""


NOT_ALLOWED = (405, {"allow": "POST"}, b"")  # GET (no server-initiated stream) and DELETE (no session)
