"""msnb's custom TorchServe metrics: per-stage times and batch sizes, reported over a window, and the batches formed
(shared handler).

``MsnbBatches`` counts the batches the server formed, by their size (its ``BatchSize`` dimension), for a model whose
batch size is above 1: what ``%ms_status`` shows as the batches formed. It is reported with every batch (a window
would hold the last batches of a burst back until the next one), which costs one metric line per batch, not per
request.

Depends only on the standard library and (optionally) TorchServe, never on msnb.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)
METRICS = {"preprocess": "MsnbPreprocessTime", "inference": "MsnbInferenceTime", "postprocess": "MsnbPostprocessTime"}
BATCH_SIZE_METRIC = "MsnbBatchSize"
BATCHES_METRIC, SIZE_DIMENSION = "MsnbBatches", "BatchSize"
# What every model reports (over a window); BATCHES_METRIC only where batches form (batch size above 1).
WINDOW_METRICS = (*METRICS.values(), BATCH_SIZE_METRIC)


def record_metrics(context: Any, timings: dict[str, float], batch_size: float) -> None:
    """Report per-stage times and the batch size as TorchServe custom metrics; never raises."""
    metrics = getattr(context, "metrics", None)
    if metrics is None:
        return
    try:
        for stage, ms in timings.items():
            # Pass a fresh dimensions list: TorchServe appends to its mutable default argument.
            metrics.add_time(METRICS[stage], round(ms, 3), None, "ms", [])
        metrics.add_metric(BATCH_SIZE_METRIC, batch_size, "count", None, [], *_gauge())
    except Exception:  # metrics are best effort
        logger.warning("could not record metrics", exc_info=True)


class MetricsWindow:
    """Per-stage times and batch sizes, reported as TorchServe custom metrics at most once per ``interval_s``.

    Every metric is a line the worker logs and the frontend parses: four lines per batch cost about 15 %
    of the throughput at batch size 1 (measured against a hand-written handler). So batches are summed,
    and the first batch after ``interval_s`` reports the window's means (ms per batch, samples per batch)
    and starts a new one. At low traffic that is every batch; under load, one line per metric a second.
    """

    def __init__(self, interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.interval_s, self.clock = interval_s, clock
        self._reported_at: float | None = None
        self._reset()

    def _reset(self) -> None:
        self.batches, self.samples = 0, 0
        self.stage_ms = dict.fromkeys(METRICS, 0.0)

    def add(self, context: Any, timings: dict[str, float], batch_size: int) -> None:
        if _configured_batch_size(context) > 1:
            record_batch(context, batch_size)
        self.batches += 1
        self.samples += batch_size
        for stage, ms in timings.items():
            self.stage_ms[stage] += ms
        now = self.clock()
        if self._reported_at is not None and now - self._reported_at < self.interval_s:
            return
        self._reported_at = now
        mean_size = self.samples / self.batches
        record_metrics(
            context,
            {stage: ms / self.batches for stage, ms in self.stage_ms.items()},
            int(mean_size) if mean_size.is_integer() else round(mean_size, 2),
        )
        self._reset()


def record_batch(context: Any, size: int) -> None:
    """Count one batch of ``size`` samples the server formed (``MsnbBatches``, dimension ``BatchSize``); never raises."""
    metrics = getattr(context, "metrics", None)
    if metrics is None:
        return
    try:
        metrics.add_metric(BATCHES_METRIC, 1, "count", None, [_dimension(SIZE_DIMENSION, str(size))], *_counter())
    except Exception:  # metrics are best effort
        logger.warning("could not record the batch metric", exc_info=True)


def _configured_batch_size(context: Any) -> int:
    try:
        return int((getattr(context, "system_properties", None) or {}).get("batch_size") or 1)
    except (TypeError, ValueError):
        return 1


def _dimension(name: str, value: str) -> Any:
    try:
        from ts.metrics.dimension import Dimension
    except ImportError:  # no TorchServe here: the same two fields
        from collections import namedtuple

        Dimension = namedtuple("Dimension", "name value")
    return Dimension(name, value)


def _counter() -> tuple:
    try:
        from ts.metrics.metric_type_enum import MetricTypes
    except ImportError:
        return ()
    return (MetricTypes.COUNTER,)


def _gauge() -> tuple:
    try:
        from ts.metrics.metric_type_enum import MetricTypes
    except ImportError:
        return ()
    return (MetricTypes.GAUGE,)
