"""The shadow front's metrics address: ``GET /metrics`` (Prometheus' text, no key, as TorchServe's metrics address),
and with the front's control key ``GET /shadow/status``, ``POST /shadow/split`` ``{"percent": P}`` and ``POST
/shadow/cutover`` ``{"models": [...]}`` — what `msnb shadow status | split | cutover` call, and their client."""

from __future__ import annotations

import json
from typing import Any

import requests

from msnb.engines import proxy
from msnb.errors import MsnbError, OptionError, ServerError
from msnb.templates.msnb_runtime.ts.checks import INVALID_KEY, carries_key
from msnb.templates.msnb_runtime.ts.wire import error_reply

LIMIT = 64 << 10  # a control request's body at most
JSON = {"content-type": "application/json"}
PROMETHEUS = {"content-type": "text/plain; version=0.0.4; charset=utf-8"}
STATUS, SPLIT, CUTOVER = "/shadow/status", "/shadow/split", "/shadow/cutover"
TIMEOUT_S = 30.0


def answer(shadow: Any, request: proxy.Request) -> tuple[int, dict, bytes]:
    """The answer to one call on the metrics address (``shadow``: the running ``ingress.Shadow``)."""
    if (request.method, request.path) == ("GET", "/metrics"):
        return 200, PROMETHEUS, shadow.tally.prometheus(gauges(shadow)).encode()
    if not carries_key(request.header(b"authorization").decode("latin-1"), shadow.control_key):
        return error_reply(*INVALID_KEY)
    try:
        if (request.method, request.path) == ("GET", STATUS):
            return 200, JSON, json.dumps(status(shadow)).encode()
        if (request.method, request.path) == ("POST", SPLIT):
            return (
                200,
                JSON,
                json.dumps(shadow.traffic.set_split(_field(request.body, "percent", (int, float)))).encode(),
            )
        if (request.method, request.path) == ("POST", CUTOVER):
            models = _field(request.body, "models", list, [])
            return 200, JSON, json.dumps(shadow.traffic.cutover([str(m) for m in models])).encode()
    except MsnbError as err:
        return error_reply(400, "BadRequestException", err.render())
    return error_reply(
        404,
        "ResourceNotFoundException",
        f"{request.method} {request.path}: the metrics address "
        f"answers GET /metrics, GET {STATUS}, POST {SPLIT} and POST {CUTOVER}.",
    )


def _field(body: bytes, name: str, kind, default: Any = None) -> Any:
    try:
        value = json.loads(body or b"{}").get(name, default)
    except (ValueError, AttributeError):
        value = None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise OptionError(f"the body needs {name!r}.", f'send {{"{name}": ...}} as JSON (msnb shadow does).')
    return value


def status(shadow: Any) -> dict:
    """Everything `msnb shadow status` shows: the addresses, the traffic, the queue and every model's counts."""
    sides = {role: side.url for role, side in shadow.sides.items()}
    return {
        "front": shadow.url,
        "metrics": shadow.metrics_url,
        **sides,
        "log": str(shadow.log.path),
        **shadow.traffic.state(),
        "queued": shadow.mirror.queue.qsize(),
        "models": shadow.tally.snapshot(),
    }


def gauges(shadow: Any) -> dict[str, dict[tuple, float]]:
    traffic = shadow.traffic
    return {
        "split_percent": {(): traffic.split},
        "cutover": {(("model", m),): float(traffic.is_cut(m)) for m in sorted(shadow.tally.models)},
    }


def describe(event: dict) -> str:
    """A traffic change as the front says it: what, by whom, and each model's counts."""
    counts = (
        "; ".join(
            f"{name}: {c['requests']} requests, {c['equal']} equal, {c['different']} different, "
            f"{c['candidate_errors']} candidate errors, {c['equal_in_a_row']} equal in a row"
            for name, c in event["counts"].items()
        )
        or "no request yet"
    )
    if event["event"] == "split":
        return f"split: {event['was']:g}% -> {event['percent']:g}% of requests answered by the candidate ({counts})"
    models = ", ".join(event["models"]).replace("*", "every model")
    return f"cutover ({event['by']}): the candidate answers {models}, the primary shadows it ({counts})"


def table(shown: dict) -> str:
    """`msnb shadow status`: the sides and the traffic, then one row per model."""
    cut = ", ".join(shown["cutover"]).replace("*", "every model") or "none"
    head = [
        f"front {shown['front']}  primary {shown['primary']}  candidate {shown['candidate']}",
        f"split {shown['split']:g}%  cut over: {cut}  queued copies: {shown['queued']}  differences {shown['log']}",
    ]
    rows = [
        (
            "model",
            "requests",
            "equal",
            "different",
            "candidate errors",
            "dropped",
            "answered p/c",
            "primary p50/p99 ms",
            "candidate p50/p99 ms",
        )
    ]
    for name, c in shown["models"].items():
        late = {
            r: "/".join("-" if v is None else f"{v:.1f}" for v in c["latency_ms"][r].values()) for r in c["latency_ms"]
        }
        rows.append(
            (
                name,
                *(str(c[k]) for k in ("requests", "equal", "different", "candidate_errors", "dropped")),
                f"{c['answered']['primary']}/{c['answered']['candidate']}",
                late["primary"],
                late["candidate"],
            )
        )
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, width)).rstrip() for row in rows]
    return "\n".join(head + (lines if shown["models"] else ["no request mirrored yet"]))


def call(metrics_url: str, key: str, method: str, path: str, body: dict | None = None) -> dict:
    """One control call to a running front; a ServerError when it does not answer or refuses."""
    headers = {"Authorization": f"Bearer {key}"}
    try:
        resp = requests.request(method, metrics_url + path, json=body, headers=headers, timeout=TIMEOUT_S)
    except requests.RequestException as err:
        raise ServerError(
            f"msnb shadow's front at {metrics_url} does not answer ({type(err).__name__}).",
            "is it still running? Start it again with msnb shadow ...",
        ) from None
    try:
        found = resp.json()
    except ValueError:
        found = {"message": resp.text[:300]}
    if resp.status_code != 200:
        message, _, hint = str(found.get("message")).partition("\nHint: ")
        raise ServerError(
            f"msnb shadow's front refused {method} {path}: {message}",
            hint or "run the command as the user who started msnb shadow, with its --state file.",
        )
    return found
