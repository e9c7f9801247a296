"""The batches each served model's server formed and the fallbacks it took, read from either engine's metrics."""

from __future__ import annotations

from msnb.engines.model_metrics import ModelMetrics, parse, served_metrics
from msnb.engines.ray.metrics import translate

TORCHSERVE = """\
# TYPE MsnbBatches counter
MsnbBatches{BatchSize="4",Level="Model",ModelName="churn",Hostname="h"} 3.0
MsnbBatches{BatchSize="1",Level="Model",ModelName="churn",Hostname="h"} 2.0
# TYPE MsnbBatchFallback counter
MsnbBatchFallback{Level="Model",ModelName="churn",Hostname="h"} 1.0
"""
RAY = """\
# TYPE ray_msnbbatches counter
ray_msnbbatches_total{BatchSize="4",SessionName="s",model_name="churn",WorkerId="a"} 2.0
ray_msnbbatches_total{BatchSize="4",SessionName="s",model_name="churn",WorkerId="b"} 1.0
ray_msnbbatches_total{BatchSize="2",SessionName="s",model_name="churn",WorkerId="b"} 5.0
# TYPE ray_msnbbatchfallback counter
ray_msnbbatchfallback_total{SessionName="s",model_name="churn",WorkerId="a"} 2.0
"""


class Metrics:
    def __init__(self, text: str):
        self.text = text

    def metrics(self):
        from msnb.engines.model_metrics import per_model

        return per_model(parse(self.text))


def test_torchserves_custom_metrics_say_the_batches_formed_by_size_and_the_fallbacks():
    assert served_metrics(Metrics(TORCHSERVE)) == {"churn": ModelMetrics(fallbacks=1, sizes={4: 3, 1: 2})}
    assert served_metrics(Metrics(TORCHSERVE))["churn"].line() == (
        "batches formed: size 4 ×3, size 1 ×2; 1 batch fallback (see %ms_logs)"
    )


def test_ray_replicas_counts_are_summed_per_model_and_size_after_the_translation():
    translated = translate(RAY, {"churn": ("churn", "1.0")}, "h")
    assert served_metrics(Metrics(translated)) == {"churn": ModelMetrics(fallbacks=2, sizes={4: 3, 2: 5})}


def test_metrics_that_cannot_be_read_say_nothing_and_a_model_without_batches_has_no_line():
    class Down:
        def metrics(self):
            raise ConnectionError("refused")

    assert served_metrics(Down()) == {} and ModelMetrics().line() == ""
