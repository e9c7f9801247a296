"""What a Ray Serve replica gives a handler in place of a TorchServe worker: its GPU id, TorchServe's metrics API over
Ray's metrics (exported in Prometheus format), and its log lines and prints in the replica's own log file.

Depends on the standard library and (when a metric is first used) ``ray.serve.metrics``, never on msnb.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

logger = logging.getLogger("ray.serve")  # Serve's logger: its lines land in the replica's own log file
_OWN_DIMENSIONS = ("model_name", "ModelName", "Level")  # the model's name is its tag; Ray has no level


def replica_gpu_id(assigned_gpus: list) -> int | None:
    """The context's ``gpu_id`` on a replica: Ray sets CUDA_VISIBLE_DEVICES to the GPUs it assigned, so the
    first assigned GPU is ``cuda:0`` whatever its physical id; None when the replica has no GPU."""
    return 0 if assigned_gpus else None


class RayMetrics:
    """TorchServe's metrics API (``add_time``, ``add_metric``, ...) over ``ray.serve.metrics`` gauges and counters,
    which Ray exports in Prometheus format on each node's metrics port (names prefixed ``ray_``, lowercased)."""

    def __init__(self, model_name: str, factory: Any = None):
        self.model_name, self._factory, self._metrics = model_name, factory, {}
        self.request_ids: Any = None

    def set_request_ids(self, request_ids: Any) -> None:
        """TorchServe's loader names the load's request (a metrics cache API); Ray's metrics have no request."""
        self.request_ids = request_ids

    def _metric(self, name: str, kind: str, dimensions: Any = None) -> Any:
        """The Ray metric ``name``, its tags the model's name and the names of the ``dimensions`` it was first given
        (TorchServe's own dimensions, ModelName and Level, are the model's name here)."""
        if (name, kind) not in self._metrics:
            factory = self._factory
            if factory is None:
                from ray.serve import metrics as factory
            cls = factory.Counter if kind == "counter" else factory.Gauge
            keys = ("model_name", *(d.name for d in dimensions or () if d.name not in _OWN_DIMENSIONS))
            self._metrics[name, kind] = cls(name, description=f"msnb handler metric {name}", tag_keys=keys), keys
        return self._metrics[name, kind][0]

    def _tags(self, name: str, kind: str, dimensions: Any) -> dict:
        """The model's name, and each dimension's value for the tags the metric was made with."""
        keys, given = self._metrics[name, kind][1], {d.name: str(d.value) for d in dimensions or ()}
        return {"model_name": self.model_name, **{k: given[k] for k in keys[1:] if k in given}}

    def add_time(self, name: str, value: float, idx: Any = None, unit: str = "ms", dimensions: Any = None, *_, **__):
        self._metric(name, "gauge").set(float(value), tags={"model_name": self.model_name})

    def add_metric(
        self,
        name: str,
        value: float,
        unit: str = "count",
        idx: Any = None,
        dimensions: Any = None,
        metric_type: Any = "counter",  # TorchServe's default
        *_,
        **__,
    ):
        kind = _kind(metric_type)
        metric = self._metric(name, kind, dimensions)
        tags = self._tags(name, kind, dimensions)
        if kind == "counter":
            metric.inc(float(value), tags=tags)
        else:
            metric.set(float(value), tags=tags)

    def add_counter(self, name: str, value: float = 1, idx: Any = None, dimensions: Any = None, *_: Any, **__: Any):
        self._metric(name, "counter").inc(float(value), tags={"model_name": self.model_name})

    def add_size(self, name: str, value: float, idx: Any = None, unit: str = "MB", dimensions: Any = None, *_, **__):
        self._metric(name, "gauge").set(float(value), tags={"model_name": self.model_name})

    add_percent = add_size

    def add_metric_to_cache(
        self, metric_name: str, unit: str = "count", dimension_names: Any = None, metric_type: Any = "counter"
    ) -> "CachedMetric":
        """TorchServe's metrics cache API (``metric_type`` a ``ts.metrics.metric_type_enum.MetricTypes`` or its
        name): the metric, whose ``add_or_update`` / ``update`` set a gauge or increase a counter."""
        return self.get_metric(metric_name, metric_type)

    def get_metric(self, metric_name: str, metric_type: Any = "counter") -> "CachedMetric":
        kind = _kind(metric_type)
        return CachedMetric(self._metric(metric_name, kind), kind, self.model_name)


def _kind(metric_type: Any) -> str:
    """A ``ts.metrics.metric_type_enum.MetricTypes`` (or its name) as a Ray metric's kind: counter or gauge."""
    return "counter" if str(getattr(metric_type, "value", metric_type)).lower().endswith("counter") else "gauge"


class CachedMetric:
    """One metric of TorchServe's metrics cache API over a Ray gauge or counter."""

    def __init__(self, metric: Any, kind: str, model_name: str):
        self.metric, self.kind, self.tags = metric, kind, {"model_name": model_name}

    def add_or_update(self, value: float, dimension_values: Any = None, request_id: str = "") -> None:
        if self.kind == "counter":
            self.metric.inc(float(value), tags=self.tags)
        else:
            self.metric.set(float(value), tags=self.tags)

    def update(self, value: float, request_id: str = "", dimensions: Any = None) -> None:
        self.add_or_update(value)


class LogLines:
    """A text stream that also sends each complete line to ``logger``: a replica's prints in its log file."""

    def __init__(self, logger: logging.Logger, original: Any):
        self.logger, self.original, self.pending = logger, original, ""

    def write(self, text: str) -> int:
        self.original.write(text)
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.strip():
                self.logger.info(line)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


def worker_logs() -> None:
    """Log as a TorchServe worker does, into the file ``%ms_logs`` reads: TorchServe's worker logs the root logger
    at INFO and writes its prints to model_log.log; here both go to the replica's log file (the file handlers of
    Serve's "ray.serve" logger), so the handler's own log lines and prints are there, not only Serve's."""
    root = logging.getLogger()
    files = [h for h in logger.handlers if not isinstance(h, logging.StreamHandler)]
    root.handlers += [h for h in files if h not in root.handlers]
    root.setLevel(min(root.level or logging.INFO, logging.INFO))
    if not isinstance(sys.stdout, LogLines):
        sys.stdout = LogLines(logger, sys.stdout)
