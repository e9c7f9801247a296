"""Each pair of answers judged with `msnb compare`'s rule (``msnb.engines.compare.difference``: the status, then the
body — JSON compared value by value, numbers within ``--rtol`` / ``--atol``, bytes otherwise) and counted; an equal
pair one more toward ``--cutover-after``; a pair that differs one line of the differences file (JSON Lines: time,
model, version, the request or its digest when it is over the limit, what differs first, both statuses, both bodies
cut to the limit, both latencies), which also gets one line per traffic change (a split, a cutover) with the counts
that allowed it."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from msnb.engines import compare
from msnb.engines.shadow.exchange import Reply
from msnb.engines.shadow.mirror import Copy
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY
from msnb.engines.shadow.tally import Tally
from msnb.engines.shadow.traffic import Traffic

BODY_LIMIT = 4096  # bytes of each body a line keeps (--log-body-limit)
# The fields each server gives an answer of its own (OpenAI's ids and times, a v2 answer's generated id), left out of
# the comparison of the routes whose answers carry them.
VOLATILE = frozenset({"id", "created", "created_at", "system_fingerprint"})


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


def other(role: str) -> str:
    return CANDIDATE if role == PRIMARY else PRIMARY


class Judge:
    """``judge(copy, answered, copied)``: the client's answer and the copy's, once both are in (None: none came)."""

    def __init__(self, tally: Tally, traffic: Traffic, log: DiffLog, tolerance: compare.Tolerance = compare.EXACT):
        self.tally, self.traffic, self.log, self.tolerance = tally, traffic, log, tolerance

    def __call__(self, copy: Copy, answered: Reply | None, copied: Reply | None) -> None:
        counts = self.tally.of(copy.route.model)
        if copied is None:
            counts.errors[copy.to] += 1
        else:
            counts.took(copy.to, copied.seconds)
        if answered is None or copied is None:  # the answering side's error is counted where it answered
            if (copied if copy.to == CANDIDATE else answered) is None:  # the candidate gave none: trust starts over
                counts.streak = 0
            return
        replies = {other(copy.to): answered, copy.to: copied}
        what = self.difference(copy, replies[PRIMARY], replies[CANDIDATE])
        if what is None:
            counts.equal += 1
            counts.streak += 1
            self.traffic.compared(copy.route.model)
            return
        counts.different += 1
        counts.streak = 0
        where = {"model": copy.route.model, "version": copy.route.version, "answered_by": other(copy.to)}
        self.log.difference(where, request_field(copy.method, copy.url, copy.body, self.log.limit), replies, what)

    def difference(self, copy: Copy, primary: Reply, candidate: Reply) -> str | None:
        request = compare.Request(copy.route.model, copy.route.path)
        bodies = [steady(r.body) if copy.route.volatile else r.body for r in (primary, candidate)]
        left, right = compare.Answer(primary.status, bodies[0]), compare.Answer(candidate.status, bodies[1])
        return compare.difference(request, left, right, self.tolerance)


def steady(body: bytes) -> bytes:
    """An answer of OpenAI's API, MCP or KServe v2 without the fields each server makes its own (``VOLATILE``: a
    completion's id and time, a v2 answer's generated id); a stream of server-sent events as the list of its
    events' JSON. A body that is neither is compared as it is."""
    text = body.decode("utf-8", "replace")
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    try:
        value = [json.loads(e) for e in events if e.strip() != "[DONE]"] if events else json.loads(text)
    except ValueError:
        return body
    return json.dumps(_without_volatile(value)).encode()


def _without_volatile(value):
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value
