"""`%ms_compare NAME`: `msnb compare`'s migration check for a handler cell: the captured handler served by the
notebook's TorchServe and by its Ray Serve side by side, each request sent to both, a table of statuses and
equal-or-first-difference; an error (the cell fails) when any pair differs.

The engine the session serves on is used as ``%ms_serve`` uses it (its bookkeeping kept); the other one is the
notebook's process-wide engine of that kind, started if it does not run and stopped afterwards when this check
started it, so that one engine keeps serving the notebook, as after a switch of engines.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

from msnb.engines import compare, registry
from msnb.engines.compare import Answer, Request
from msnb.engines.protocol import Engine
from msnb.errors import MsnbError
from msnb.options import parse_data
from msnb.session.core import Session, default_engine
from msnb.session.deployment import deploy

Row = tuple[Request, Answer, Answer, "str | None"]
# What the other engine serves for each name (the spec's digest): the same cell is not deployed twice.
_deployed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def requests_for(name: str, data: str | None, example: Any, namespace: dict | None = None) -> list[Request]:
    """The requests: ``@FILE`` is `msnb compare`'s JSON Lines file; any other ``data`` one body, as ``%ms_predict``
    reads its --data (JSON, or a variable of ``namespace``); None the handler's ``--example``."""
    text = data.strip().strip("'\"") if data is not None else None
    if text is not None and text.startswith("@"):
        return compare.read_requests(Path(text[1:]).expanduser(), [name])
    body = example if data is None else parse_data(data, namespace, Path.cwd())
    return [compare.parse_request(json.dumps({"body": body}), 1, [name], Path.cwd())]


def compare_cell(session: Session, name: str, data: str | None = None, namespace: dict | None = None) -> list[Row]:
    """Serve the handler ``name`` on both engines and send every request (``data``: see ``requests_for``) to both;
    the rows when all agree, else an MsnbError whose details are the table."""
    spec = session.get(name)
    requests = requests_for(spec.name, data, spec.example, namespace)
    other_kind = registry.counterpart(session.engine).kind
    own = session.serve(spec.name)
    other, started = _other_engine(other_kind)
    try:
        _serve_other(other, spec)
        servers = {session.engine: own, other_kind: other}
        reference = registry.reference().kind  # its answers are the truth: the first column
        candidate = next(kind for kind in servers if kind != reference)
        rows = compare.compare(servers[reference], servers[candidate], requests)
    finally:
        if started:
            _deployed.pop(other, None)
            other.stop()
    return checked(rows)


def _other_engine(kind: str) -> tuple[Engine, bool]:
    """The notebook's engine of ``kind``, running, and whether this call started it."""
    was_running = registry.get(kind).running()
    engine = default_engine(kind)
    if not engine.running:
        engine.start()
    return engine, not was_running


def _serve_other(server: Engine, spec: Any) -> None:
    served = _deployed.setdefault(server, {})
    if served.get(spec.name) != spec.digest() or spec.name not in {m.name for m in server.models()}:
        deploy(server, spec)
        served[spec.name] = spec.digest()


def checked(rows: list[Row]) -> list[Row]:
    """``rows`` when every pair of answers agrees or differs only as docs/ray-design.md documents (the table says
    which); else the MsnbError that fails the cell, with the table."""
    failing = compare.undocumented(rows)
    if not failing:
        return rows
    raise MsnbError(
        f"TorchServe and Ray Serve disagree on {len(failing)} of {len(rows)} requests.",
        "each row names the first difference; docs/ray-design.md lists where a Ray replica's worker differs from "
        "TorchServe's (those rows are marked documented and pass).",
        compare.table(rows),
    )
