"""The Ray engine's context metrics speak TorchServe's whole metrics API: metric_type=, the metrics cache
(add_metric_to_cache, get_metric) and percent/size metrics, as handlers written for TorchServe call them."""

from __future__ import annotations

from ts.metrics.metric_type_enum import MetricTypes

from msnb.templates.msnb_runtime.ray.replica import RayMetrics


class Recorded:
    """ray.serve.metrics' Gauge/Counter API, recording each call."""

    calls: list = []

    class Gauge:
        def __init__(self, name, description="", tag_keys=()):
            self.name = name

        def set(self, value, tags=None):
            Recorded.calls.append(("set", self.name, value))

        def inc(self, value, tags=None):
            Recorded.calls.append(("inc", self.name, value))

    Counter = Gauge


def test_a_handler_using_torchserves_metrics_cache_and_metric_type_records_its_metrics():
    Recorded.calls = []
    metrics = RayMetrics("m", Recorded)
    loaded = metrics.add_metric_to_cache("LoadedModels", "count", [], MetricTypes.COUNTER)  # in initialize
    loaded.add_or_update(1, [])
    metrics.get_metric("LoadedModels", MetricTypes.COUNTER).update(2)
    metrics.add_metric("Accuracy", 0.5, unit="percent", metric_type=MetricTypes.GAUGE)
    metrics.add_time("Latency", 3.0, metric_type=MetricTypes.GAUGE)
    metrics.add_percent("Share", 40.0, metric_type=MetricTypes.GAUGE)
    metrics.add_counter("Seen", 1, metric_type=MetricTypes.COUNTER)
    assert Recorded.calls == [
        ("inc", "LoadedModels", 1.0),
        ("inc", "LoadedModels", 2.0),
        ("set", "Accuracy", 0.5),
        ("set", "Latency", 3.0),
        ("set", "Share", 40.0),
        ("inc", "Seen", 1.0),
    ]
