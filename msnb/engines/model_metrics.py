"""What each served model's workers counted, read from an engine's metrics (TorchServe's metrics API, the Ray
metrics the replicas export): one small record per model, e.g. its batch fallbacks (a batched forward retried one
sample at a time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests

from msnb.errors import MsnbError
from msnb.templates.msnb_runtime.handler.fallback import FALLBACK_METRIC

if TYPE_CHECKING:
    from msnb.engines.protocol import Engine

Samples = dict[str, list[tuple[dict, float]]]  # a Prometheus sample's name -> [(its labels, its value), ...]
MODEL_LABELS = ("ModelName", "model_name")  # TorchServe's label of a handler metric, and the replicas' tag on Ray


@dataclass(frozen=True)
class ModelMetrics:
    """One served model's counts, summed over its workers (replicas)."""

    fallbacks: int = 0  # batch fallbacks: batched forwards retried one sample at a time (the shared handler's metric)


def parse(text: str) -> Samples:
    """Prometheus text (a ``/metrics`` answer), parsed: sample name -> [(labels, value), ...]."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def per_model(samples: Samples) -> dict[str, ModelMetrics]:
    """Model name -> its record, from Prometheus samples in TorchServe's names (Ray's ``ray_`` prefix and
    lowercasing, and a counter's ``_total``, read through)."""
    fallbacks: dict[str, int] = {}
    for sample, rows in samples.items():
        if _bare(sample) != FALLBACK_METRIC.lower():
            continue
        for labels, value in rows:
            name = next((labels[key] for key in MODEL_LABELS if labels.get(key)), None)
            if name:
                fallbacks[name] = fallbacks.get(name, 0) + int(value)
    return {name: ModelMetrics(fallbacks=count) for name, count in fallbacks.items()}


def batch_fallbacks(server: Engine) -> dict[str, int]:
    """Model name -> batch fallbacks its workers counted; {} when the metrics cannot be read (a status line must
    still show the rest): the engine's error, or its metrics address not answering."""
    try:
        metrics = server.metrics()
    except (MsnbError, OSError, requests.RequestException):
        return {}
    return {name: record.fallbacks for name, record in metrics.items()}


def _bare(sample: str) -> str:
    return sample.removeprefix("ray_").removesuffix("_total").lower()


__all__ = ["ModelMetrics", "Samples", "batch_fallbacks", "parse", "per_model"]
