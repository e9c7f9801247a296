"""The differences file (JSON Lines): one line per pair of answers that differ — time, model, version, the request
(or its digest when it is over the limit), what differs first, both statuses, both bodies cut to the limit, both
latencies — and one line per traffic change (a split, a cutover) with the counts that allowed it."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from msnb.engines.shadow.exchange import Reply
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY

BODY_LIMIT = 4096  # bytes of each body a line keeps (--log-body-limit)


def body_field(body: bytes, limit: int) -> dict:
    """A body as a line keeps it: its text (cut to ``limit`` bytes), its size, and whether it was cut."""
    return {"body": body[:limit].decode("utf-8", "replace"), "bytes": len(body), "cut": len(body) > limit}


def request_field(method: str, url: str, body: bytes, limit: int) -> dict:
    """The request: method, URL and body; a body over ``limit`` bytes as its SHA-256 digest and size."""
    if len(body) <= limit:
        return {"method": method, "url": url, "body": body.decode("utf-8", "replace"), "bytes": len(body)}
    return {"method": method, "url": url, "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}


class DiffLog:
    """Appends lines to ``path``, each flushed as it is written (a reader tails it live)."""

    def __init__(self, path: Path, limit: int = BODY_LIMIT):
        self.path, self.limit = Path(path), limit
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.out = self.path.open("a", encoding="utf-8")

    def difference(self, where: dict, request: dict, answers: dict[str, Reply], what: str) -> None:
        """One pair that differs: ``where`` (model, version, answered_by), ``request`` (``request_field``)."""
        sides = {
            role: {
                "status": answers[role].status,
                **body_field(answers[role].body, self.limit),
                "latency_ms": round(answers[role].seconds * 1000, 3),
            }
            for role in (PRIMARY, CANDIDATE)
        }
        self.write({"kind": "difference", "time": _now(), **where, "request": request, "difference": what, **sides})

    def event(self, event: dict) -> None:
        self.write({"kind": event["event"], **event})

    def write(self, line: dict) -> None:
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()

    def close(self) -> None:
        self.out.close()


def _now() -> str:
    """The time in UTC with milliseconds (ISO 8601)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
