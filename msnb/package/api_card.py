"""A model folder's API card (msnb_api.json): how it shows as an MCP tool, whether /v1 streams it and whether it
answers /v1/embeddings (``--embeddings``).

Its description is the handler's docstring (the cell's own, else its entry's or first documented role's), its input
schema the one ``--schema FILE`` gives or one inferred from ``--example``; a sample that is not a JSON object is the
tool's one argument ``input`` (``wrapped``). Engines read the card with ``msnb.templates.msnb_runtime.api.mcp.read_card``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from msnb.spec import HandlerSpec
from msnb.templates.msnb_runtime.api.mcp import ANY_OBJECT, WRAP_KEY
from msnb.templates.msnb_runtime.handler.names import API_CARD

ROLE_ORDER = ("inference", "preprocess", "postprocess", "init_function")  # where a docstring is looked for
JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (type(None), "null"))


def card(spec: HandlerSpec) -> dict:
    """The card of ``spec``: description, input_schema, wrapped, streams, embeds."""
    schema = dict(spec.input_schema) if spec.input_schema else infer(spec.example)
    wrapped = schema.get("type") != "object"
    if wrapped:
        schema = {"type": "object", "properties": {WRAP_KEY: schema}, "required": [WRAP_KEY]}
    return {
        "description": description(spec),
        "input_schema": schema,
        "wrapped": wrapped,
        "streams": bool(spec.streaming),
        "embeds": spec.embeddings,
    }


def write(spec: HandlerSpec, model_dir: Path) -> None:
    (Path(model_dir) / API_CARD).write_text(json.dumps(card(spec), indent=1))  # as ``relabel`` writes it again


def description(spec: HandlerSpec) -> str:
    """The handler's docstring; without one, a line naming the model."""
    tree = ast.parse(spec.blocks[-1].source) if spec.blocks else ast.Module(body=[], type_ignores=[])
    names = [spec.entry] if spec.entry else [spec.roles[r] for r in ROLE_ORDER if r in spec.roles]
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for node in [tree, *(defs[n] for n in names if n in defs)]:
        doc = ast.get_docstring(node)
        if doc:
            return doc
    return unnamed(spec.name, spec.version)


def unnamed(name: str, version: str) -> str:
    """The description of a handler without a docstring: it names the model and its version."""
    return f"The model {name} (version {version}), served by msnb."


def relabel(model_dir: Path, name: str, version: str, new: str) -> None:
    """The card of ``name`` ``version`` in ``model_dir`` made to name version ``new`` (only a description that
    names the version does); nothing else of it changes."""
    path = Path(model_dir) / API_CARD
    written = json.loads(path.read_text())
    if written.get("description") == unnamed(name, version):
        written["description"] = unnamed(name, new)
        path.write_text(json.dumps(written, indent=1))


def infer(example: Any) -> dict:
    """A JSON Schema that ``example`` fits: types, an object's properties (all required), a list's first item."""
    if example is None:
        return dict(ANY_OBJECT)
    if isinstance(example, dict):
        props = {str(k): infer_value(v) for k, v in example.items()}
        return {"type": "object", "properties": props, "required": list(props)}
    return infer_value(example)


def infer_value(value: Any) -> dict:
    if isinstance(value, dict):
        return infer(value)
    if isinstance(value, (list, tuple)):
        return {"type": "array", "items": infer_value(value[0])} if value else {"type": "array"}
    for kind, name in JSON_TYPES:
        if isinstance(value, kind):
            return {"type": name}
    return {}  # bytes, a tensor: any value
