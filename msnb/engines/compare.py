"""The migration check: the same requests sent to a plain TorchServe and to Ray Serve serving the same archives, each
pair of answers compared (status, and body equal or its first difference).

A request file is JSON Lines, one request a line: ``model`` (default: the only model served), ``path``
(``predictions`` — the default —, ``explanations`` or ``describe``), the body as ``body`` (JSON, sent as
application/json), ``text`` (sent as text/plain) or ``body_file`` (its bytes, relative to the request file's folder),
``headers`` (a Content-Type among them), and ``stream: true`` to read a streamed answer piece by piece.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msnb.engines.protocol import Engine
from msnb.errors import OptionError

PATHS = ("predictions", "explanations", "describe")
DESCRIBED = ("modelName", "modelVersion", "customizedMetadata")  # what both engines' describe answers know
REQUESTS_HINT = (
    'one JSON object a line, e.g. {"model": "news", "text": "a good movie"} or {"path": "describe"}; keys: model, '
    "path (predictions, explanations, describe), body | text | body_file, headers, stream"
)


@dataclass(frozen=True)
class Request:
    """One request of the file, as it is sent to both servers."""

    model: str
    path: str = "predictions"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False
    line: int = 0

    def label(self) -> str:
        return f"{self.line}: {self.path} {self.model}" + (" (stream)" if self.stream else "")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    pieces: int = 1


def read_requests(path: Path, models: list[str]) -> list[Request]:
    """The requests of the JSON Lines file ``path``; an OptionError naming the line that is not one."""
    out = []
    for number, text in enumerate(Path(path).read_text().splitlines(), 1):
        if text.strip():
            out.append(parse_request(text, number, models, Path(path).parent))
    if not out:
        raise OptionError(f"{path} holds no request.", REQUESTS_HINT)
    return out


def parse_request(text: str, number: int, models: list[str], base: Path) -> Request:
    try:
        item = json.loads(text)
        if not isinstance(item, dict):
            raise ValueError("not a JSON object")
        model = item.get("model") or (models[0] if len(models) == 1 else None)
        path = item.get("path", "predictions")
        if model not in models or path not in PATHS:
            raise ValueError(f"model {model!r} is not served ({', '.join(models)})" if model not in models else path)
        body, headers = _body(item, base)
        return Request(model, path, body, {**headers, **item.get("headers", {})}, bool(item.get("stream")), number)
    except (ValueError, OSError, TypeError) as err:
        raise OptionError(f"request line {number}: {err}", REQUESTS_HINT) from None


def _body(item: dict, base: Path) -> tuple[bytes, dict[str, str]]:
    if "body" in item:
        return json.dumps(item["body"]).encode(), {"content-type": "application/json"}
    if "text" in item:
        return str(item["text"]).encode(), {"content-type": "text/plain"}
    if "body_file" in item:
        return (base / item["body_file"]).read_bytes(), {"content-type": "application/octet-stream"}
    return b"", {}


def ask(server: Engine, request: Request) -> Answer:
    """``request`` sent to ``server`` (its client, with its key; a describe as the engine answers it)."""
    if request.path == "describe":
        return Answer(*server.describe(request.model))
    url = f"{server.inference_url}/{request.path}/{request.model}"
    resp = server.client.call("POST", url, "inference", data=request.body, headers=request.headers, stream=True)
    pieces = [piece for piece in resp.iter_content(None) if piece] if request.stream else [resp.content]
    return Answer(resp.status_code, b"".join(pieces), len(pieces))


def difference(request: Request, torchserve: Answer, ray: Answer) -> str | None:
    """None when the two answers agree; else what differs first."""
    if torchserve.status != ray.status:
        return f"status {torchserve.status} != {ray.status}"
    left, right = _parsed(torchserve.body), _parsed(ray.body)
    if request.path == "describe" and isinstance(left, list) and isinstance(right, list) and left and right:
        left, right = ({k: v.get(k) for k in DESCRIBED} for v in (left[0], right[0]))
    return first_difference(left, right)


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body


def first_difference(left: Any, right: Any, where: str = "$") -> str | None:
    """Where two JSON values (or byte strings) first differ, e.g. ``$.y[1]: 3 != 4``; None when equal."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right)):
            found = first_difference(left.get(key, "<missing>"), right.get(key, "<missing>"), f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return next(
            filter(None, (first_difference(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(left, right)))), None
        )
    if isinstance(left, bytes) and isinstance(right, bytes) and left != right:
        at = next((i for i, (a, b) in enumerate(zip(left, right)) if a != b), min(len(left), len(right)))
        return f"byte {at}: {left[at : at + 20]!r} != {right[at : at + 20]!r}"
    return None if left == right and type(left) is type(right) else f"{where}: {_short(left)} != {_short(right)}"


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def compare(
    reference: Engine, candidate: Engine, requests: list[Request]
) -> list[tuple[Request, Answer, Answer, str | None]]:
    """Each request sent to both engines (``reference``: TorchServe, the truth), with their two answers and the first
    difference (None: they agree)."""
    rows = []
    for request in requests:
        left, right = ask(reference, request), ask(candidate, request)
        rows.append((request, left, right, difference(request, left, right)))
    return rows


@dataclass(frozen=True)
class Documented:
    """A difference docs/ray.md documents between a TorchServe worker and a Ray replica: reported as such, and a
    failure only with ``--strict``."""

    name: str
    says: str


# docs/ray.md, "Semantics": `handle` raising for the whole batch is 503 "Prediction failed" on TorchServe, the same
# with the exception on Ray ("Prediction failed: ValueError: ...").
ERROR_MESSAGE = Documented("error-message", "an error answer's message carries the exception on Ray")


def documented(request: Request, torchserve: Answer, ray: Answer) -> Documented | None:
    """The documented difference two differing answers show, None when none explains them: the same error status,
    code and type, and Ray's message TorchServe's with the exception after it."""
    left, right = _parsed(torchserve.body), _parsed(ray.body)
    if (
        torchserve.status != ray.status
        or torchserve.status < 400
        or not (isinstance(left, dict) and isinstance(right, dict))
    ):
        return None
    same = {k: v for k, v in left.items() if k != "message"} == {k: v for k, v in right.items() if k != "message"}
    message, theirs = str(left.get("message", "")), str(right.get("message", ""))
    return ERROR_MESSAGE if same and message and theirs.startswith(message + ": ") else None


def verdict(row: tuple[Request, Answer, Answer, str | None]) -> str:
    """``equal``, ``documented: WHAT (the difference)`` or the difference."""
    request, left, right, diff = row
    if diff is None:
        return "equal"
    known = documented(request, left, right)
    return f"documented: {known.says} ({diff})" if known else diff


def undocumented(rows: list, strict: bool = False) -> list:
    """The rows that fail the check: every differing one with ``strict``, else those no documented difference
    explains."""
    return [row for row in rows if row[3] is not None and (strict or documented(*row[:3]) is None)]


def table(rows: list[tuple[Request, Answer, Answer, str | None]]) -> str:
    """The comparison as a text table: request, TorchServe's status, Ray's status, and ``equal``, a documented
    difference or the first difference."""
    lines = [("request", "torchserve", "ray", "answers")]
    lines += [(r.label(), str(a.status), str(b.status), verdict((r, a, b, diff))) for r, a, b, diff in rows]
    width = [max(len(line[i]) for line in lines) for i in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, [*width, 0])).rstrip() for line in lines)
