"""Batch fallbacks of the shared handler: a batched forward that failed and was retried one sample at a time.

The handler falls back when a batch of two or more preprocessed samples collated into one batch, but the
model's forward (or splitting its output into one item per sample) raised. Each sample then runs alone:
answers stay right, batching is lost. That is never silent: every fallback is counted (the
``MsnbBatchFallback`` custom metric), the first one is logged with its traceback (model_log.log), later ones
in one line, and an in-process test reads them back (``take``) to warn. Samples that cannot be collated at
all (ragged shapes, mixed types) run one forward each by design and are not counted here.

Depends only on the standard library and (optionally) TorchServe, never on msnb.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)
FALLBACK_METRIC = "MsnbBatchFallback"
KEEP = 10  # fallbacks kept for ``take`` (a server where nobody takes them keeps only the first few)


class FallbackRecorder:
    """Counts fallbacks, logs them, reports the metric; ``take()`` hands out the ones since the last call."""

    def __init__(self) -> None:
        self.count = 0
        self.pending: list[dict] = []

    def record(self, context: Any, error: BaseException, size: int) -> None:
        self.count += 1
        what = f"{type(error).__name__}: {error}"
        if self.count == 1:
            logger.warning(
                "msnb handler: the batched forward of %d samples failed (%s); retrying one sample at a time, "
                "batching is lost. First batch fallback of this worker, its traceback:",
                size,
                what,
                exc_info=error,
            )
        else:
            logger.warning("msnb handler: batch fallback #%d (%d samples): %s", self.count, size, what)
        if len(self.pending) < KEEP:
            self.pending.append({"error": what[:2000], "size": size})
        _count_metric(context)

    def take(self) -> list[dict]:
        taken, self.pending = self.pending, []
        return taken


def _count_metric(context: Any) -> None:
    metrics = getattr(context, "metrics", None)
    if metrics is None:
        return
    try:  # a fresh dimensions list: TorchServe appends to its mutable default argument
        metrics.add_metric(FALLBACK_METRIC, 1, "count", None, [], *_counter())
    except Exception:  # metrics are best effort
        logger.warning("could not record the batch fallback metric", exc_info=True)


def _counter() -> tuple:
    try:
        from ts.metrics.metric_type_enum import MetricTypes
    except ImportError:
        return ()
    return (MetricTypes.COUNTER,)
