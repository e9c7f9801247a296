"""Each pair of answers judged with `msnb compare`'s rule (``msnb.engines.compare.difference``: the status, then the
body — JSON compared value by value, numbers within ``--rtol`` / ``--atol``, bytes otherwise): counted, a difference
written to the differences file, an equal pair one more toward ``--cutover-after``."""

from __future__ import annotations

from msnb.engines import compare
from msnb.engines.shadow.difflog import DiffLog, request_field
from msnb.engines.shadow.exchange import Reply
from msnb.engines.shadow.mirror import Copy
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY
from msnb.engines.shadow.tally import Tally
from msnb.engines.shadow.traffic import Traffic


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
        left, right = compare.Answer(primary.status, primary.body), compare.Answer(candidate.status, candidate.body)
        return compare.difference(request, left, right, self.tolerance)
