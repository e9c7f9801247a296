"""Progress that shows life: while a blocking step runs, its bar creeps on and says the elapsed seconds."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

Progress = Callable[[str, float], None]
TICK_S = 0.5
# A phase of unknown length fills 63 % of its span in TAU_S seconds (Java starts in ~1-2 s, a load in 1-10 s).
TAU_S = 4.0


def silent(step: str, fraction: float) -> None:
    """The progress callback used when nobody watches."""


class Phase:
    """``with Phase(report, "starting Java", 0.05, 0.35):`` reports now, then every TICK_S until the block ends.

    ``detail`` (optional) is asked on every tick for what is happening inside (e.g. the worker's last log line).
    """

    def __init__(self, report: Progress, step: str, start: float, end: float, detail: Callable[[], str] | None = None):
        self.report, self.step, self.start, self.end = report, step, start, end
        self.detail = detail or (lambda: "")
        self._done = threading.Event()
        self._began = time.monotonic()

    def __enter__(self) -> Phase:
        self._began = time.monotonic()
        self.tick()
        self._thread = threading.Thread(target=self._run, name="msnb-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=2 * TICK_S)

    def tick(self) -> None:
        elapsed = time.monotonic() - self._began
        fraction = self.start + (self.end - self.start) * (1 - math.exp(-elapsed / TAU_S))
        try:
            detail = self.detail()
        except Exception:  # a detail is a courtesy; the step goes on without it
            detail = ""
        self.report(f"{self.step}{': ' + detail if detail else ''} ({elapsed:.0f} s)", fraction)

    def _run(self) -> None:
        while not self._done.wait(TICK_S):
            self.tick()
