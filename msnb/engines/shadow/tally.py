"""What `msnb shadow` counted, per model: requests, equal and different pairs, each side's errors, copies dropped,
who answered, and each side's latency (p50 / p99 of the recent answers) — as JSON for `msnb shadow status` and as
Prometheus text for the front's metrics address."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from msnb.engines.shadow.sides import CANDIDATE, PRIMARY

ROLES = (PRIMARY, CANDIDATE)
WINDOW = 4096  # the latencies kept per model and side for its quantiles (the newest)
QUANTILES = (0.5, 0.99)


def _per_side() -> dict[str, int]:
    return dict.fromkeys(ROLES, 0)


@dataclass
class ModelTally:
    """One model's counts. ``streak``: the pairs equal in a row since the last difference or candidate error."""

    requests: int = 0
    equal: int = 0
    different: int = 0
    dropped: int = 0
    streak: int = 0
    errors: dict[str, int] = field(default_factory=_per_side)
    answered: dict[str, int] = field(default_factory=_per_side)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ROLES, 0.0))
    timed: dict[str, int] = field(default_factory=_per_side)
    recent: dict[str, deque] = field(default_factory=lambda: {r: deque(maxlen=WINDOW) for r in ROLES})

    def took(self, role: str, seconds: float) -> None:
        self.seconds[role] += seconds
        self.timed[role] += 1
        self.recent[role].append(seconds)

    def quantiles_ms(self, role: str) -> dict[str, float | None]:
        ordered = sorted(self.recent[role])
        return {f"p{round(q * 100)}": _at(ordered, q) for q in QUANTILES}

    def counts(self) -> dict:
        """The counts as `msnb shadow status --json` shows them (no latencies)."""
        return {
            "requests": self.requests,
            "equal": self.equal,
            "different": self.different,
            "candidate_errors": self.errors[CANDIDATE],
            "primary_errors": self.errors[PRIMARY],
            "dropped": self.dropped,
            "answered": dict(self.answered),
            "equal_in_a_row": self.streak,
        }


def _at(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``ordered`` seconds in milliseconds (nearest rank), None when there are none."""
    if not ordered:
        return None
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000, 3)


class Tally:
    """Every model's ``ModelTally``, made on its first request."""

    def __init__(self) -> None:
        self.models: dict[str, ModelTally] = {}

    def of(self, model: str) -> ModelTally:
        found = self.models.get(model)
        if found is None:
            found = self.models[model] = ModelTally()
        return found

    def snapshot(self) -> dict[str, dict]:
        """Per model: its counts and each side's latency quantiles in ms."""
        return {
            name: {**t.counts(), "latency_ms": {r: t.quantiles_ms(r) for r in ROLES}}
            for name, t in sorted(self.models.items())
        }

    def prometheus(self, gauges: dict[str, dict[tuple, float]] | None = None) -> str:
        """The counts in Prometheus' text format (and ``gauges``: name -> labels -> value, e.g. the split)."""
        lines: list[str] = []
        for name, kind, values in self._series():
            lines += [f"# TYPE msnb_shadow_{name} {kind}"]
            lines += [f"msnb_shadow_{name}{_labels(labels)} {value}" for labels, value in values]
        for name, values in (gauges or {}).items():
            lines += [f"# TYPE msnb_shadow_{name} gauge"]
            lines += [f"msnb_shadow_{name}{_labels(labels)} {value}" for labels, value in values.items()]
        return "\n".join(lines) + "\n"

    def _series(self):
        items = sorted(self.models.items())
        for key in ("requests", "equal", "different", "dropped"):
            yield f"{key}_total", "counter", [((("model", m),), getattr(t, key)) for m, t in items]
        for key in ("errors", "answered"):
            yield (
                f"{key}_total",
                "counter",
                [((("model", m), ("side", r)), getattr(t, key)[r]) for m, t in items for r in ROLES],
            )
        yield "latency_seconds", "summary", list(self._latencies(items))

    @staticmethod
    def _latencies(items):
        for model, t in items:
            for role in ROLES:
                labels = (("model", model), ("side", role))
                ordered = sorted(t.recent[role])
                for q in QUANTILES:
                    value = _at(ordered, q)
                    yield (*labels, ("quantile", str(q))), "NaN" if value is None else value / 1000
                yield (*labels, ("", "sum")), t.seconds[role]
                yield (*labels, ("", "count")), t.timed[role]


def _labels(labels: tuple) -> str:
    """``{model="m",side="primary"}``; a ("", "sum") pair is the summary's _sum / _count suffix, written before."""
    suffix = next((value for key, value in labels if not key), "")
    shown = ",".join(f'{key}="{_escaped(value)}"' for key, value in labels if key)
    return (f"_{suffix}" if suffix else "") + (f"{{{shown}}}" if shown else "")


def _escaped(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
