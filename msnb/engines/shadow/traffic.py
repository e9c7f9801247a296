"""Who answers each request: the primary, the candidate for a canary share (``--split P``: P of every 100 requests of
a model, evenly spread), or the candidate alone once a model is cut over (``msnb shadow cutover``, or ``--cutover-after
N`` equal answers in a row); each change an event with the counts that allowed it."""

from __future__ import annotations

import time
from collections.abc import Callable

from msnb.engines.shadow.sides import CANDIDATE, PRIMARY
from msnb.engines.shadow.tally import Tally
from msnb.errors import OptionError

EVERY_MODEL = "*"  # a cutover of every model, those not asked yet included


def percent(value: float) -> float:
    """A split share in percent (0-100); an OptionError for any other."""
    if not 0 <= value <= 100:
        raise OptionError(
            f"split {value:g}: the share is a percentage.",
            "give 0 to 100 (e.g. --split 5 sends 5 of "
            "every 100 requests to the candidate, whose answer the client then gets).",
        )
    return float(value)


class Traffic:
    """The split, the models cut over, and each model's running share; ``say`` gets each change as an event dict."""

    def __init__(
        self,
        tally: Tally,
        split: float = 0.0,
        cutover_after: int | None = None,
        say: Callable[[dict], None] = lambda event: None,
    ):
        self.tally, self.split, self.cutover_after, self.say = tally, percent(split), cutover_after, say
        self.cut: set[str] = set()
        self.shares: dict[str, float] = {}  # per model: the candidate's share owed, in percent

    def answerer(self, model: str) -> str:
        """The side that answers this request of ``model`` (the other gets the copy)."""
        if EVERY_MODEL in self.cut or model in self.cut:
            return CANDIDATE
        owed = self.shares.get(model, 0.0) + self.split
        if owed >= 100:
            self.shares[model] = owed - 100
            return CANDIDATE
        self.shares[model] = owed
        return PRIMARY

    def set_split(self, share: float) -> dict:
        was, self.split = self.split, percent(share)
        return self._event("split", by="msnb shadow split", percent=self.split, was=was)

    def cutover(self, models: list[str] | None = None, by: str = "msnb shadow cutover") -> dict:
        """Make the candidate answer ``models`` (None: every model); the primary then gets the copies."""
        chosen = list(models) if models else [EVERY_MODEL]
        self.cut |= set(chosen)
        return self._event("cutover", by=by, models=chosen)

    def compared(self, model: str) -> None:
        """After each pair of ``model``: cut it over once ``--cutover-after`` pairs in a row were equal."""
        if self.cutover_after and model not in self.cut and EVERY_MODEL not in self.cut:
            if self.tally.of(model).streak >= self.cutover_after:
                self.cutover([model], by=f"--cutover-after {self.cutover_after}")

    def is_cut(self, model: str) -> bool:
        return EVERY_MODEL in self.cut or model in self.cut

    def _event(self, kind: str, **fields) -> dict:
        """The change as one event: what changed, by whom, and every model's counts at that moment."""
        counts = {name: t.counts() for name, t in sorted(self.tally.models.items())}
        event = {"event": kind, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields, "counts": counts}
        self.say(event)
        return event

    def state(self) -> dict:
        return {"split": self.split, "cutover": sorted(self.cut), "cutover_after": self.cutover_after}
