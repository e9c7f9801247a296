"""The explanation budget of the shared handler: explanations may take at most a share of a worker's time.

Explanations (Integrated Gradients: ~50 forward and backward passes) share the worker's queue with
predictions; many explanation clients would keep it full of them, and every prediction would wait behind
all of them. So explanations are paced: after an explanation that took ``d`` seconds, the worker explains
again only after ``d * (1 / SHARE - 1)`` seconds of other work (SHARE 0.25: three times as long). An
explanation request that arrives sooner is refused at once, 503 with a ``Retry-After`` header (whole
seconds until the next explanation is admitted), which costs the worker about nothing; predictions are never
refused. A short burst is admitted on credit (``BURST_S`` seconds of pacing ahead: a user asking for a few
explanations in a row is not refused); sustained explanation traffic is held to the share.

Depends only on the standard library, never on msnb.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from .explain import ExplainError

# The most of a worker's time explanations may take; the server's environment may set another share
# (1 turns pacing off: a server that answers only explanations, or a benchmark of their latency alone).
SHARE_ENV = "MSNB_EXPLAIN_SHARE"
SHARE = float(os.environ.get(SHARE_ENV, "0.25"))
BURST_S = 1.5  # pacing the worker may run ahead by: at a share of 0.25, half a second of explanations at once
REFUSED_STATUS = 503
HINT = (
    "explanations are limited to {share:.0%} of the worker's time, so that predictions keep their latency; "
    "retry after the Retry-After header's seconds (or serve a second copy of the model for explanations)."
)


class ExplainBudget:
    """Admit an explanation batch once the worker has done enough other work since the last one."""

    def __init__(self, share: float = SHARE, clock: Callable[[], float] = time.monotonic, burst: float = BURST_S):
        self.share, self.clock, self.burst = share, clock, burst
        self.next_at = -math.inf  # when the worker has done enough other work for every explanation so far
        self.refused = 0
        self.cold = True  # the first explanation batch pays the explainer's one-time imports: it is not charged

    def admit(self) -> bool:
        return self.clock() >= self.next_at - self.burst

    def spend(self, seconds: float) -> None:
        """An explanation batch took ``seconds``: the worker owes the rest of its time to other work."""
        if self.cold:
            self.cold = False
            return
        self.next_at = max(self.next_at, self.clock()) + seconds * (1 / min(max(self.share, 1e-3), 1.0) - 1)

    def retry_after(self) -> int:
        """Whole seconds until the next explanation is admitted (at least 1: Retry-After has no fractions)."""
        return max(1, math.ceil(self.next_at - self.burst - self.clock()))

    def refusal(self) -> ExplainError:
        """The error a refused explanation is answered with (its ``headers`` go on the answer)."""
        self.refused += 1
        retry = self.retry_after()
        err = ExplainError(
            f"too many explanations: this worker spent its explanation budget (retry in {retry} s)",
            HINT.format(share=self.share),
            status=REFUSED_STATUS,
        )
        err.headers = {"Retry-After": str(retry)}
        return err
