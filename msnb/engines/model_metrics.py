"""What each served model's workers counted, read from an engine's metrics (TorchServe's metrics API, the Ray
metrics the replicas export): one small record per model — the batches the server formed, by size, and its batch
fallbacks (a batched forward retried one sample at a time)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import requests

from msnb.errors import MsnbError
from msnb.templates.msnb_runtime.handler.fallback import FALLBACK_METRIC
from msnb.templates.msnb_runtime.handler.metrics import BATCHES_METRIC, SIZE_DIMENSION

if TYPE_CHECKING:
    from msnb.engines.protocol import Engine

Samples = dict[str, list[tuple[dict, float]]]  # a Prometheus sample's name -> [(its labels, its value), ...]
MODEL_LABELS = ("ModelName", "model_name")  # TorchServe's label of a handler metric, and the replicas' tag on Ray


@dataclass(frozen=True)
class ModelMetrics:
    """One served model's counts, summed over its workers (replicas)."""

    fallbacks: int = 0  # batch fallbacks: batched forwards retried one sample at a time (the shared handler's metric)
    sizes: dict[int, int] = field(default_factory=dict)  # the batches the server formed: batch size -> how many

    def line(self) -> str:
        """``batches formed: size 4 ×3, size 1 ×2; 1 batch fallback (see %ms_logs)``; empty when nothing is known."""
        said = []
        if self.sizes:
            formed = ", ".join(f"size {s} ×{n}" for s, n in sorted(self.sizes.items(), reverse=True))
            said.append(f"batches formed: {formed}")
        if self.fallbacks:
            said.append(f"{self.fallbacks} batch fallback{'s' if self.fallbacks > 1 else ''} (see %ms_logs)")
        return "; ".join(said)


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
    sizes: dict[str, dict[int, int]] = {}
    for sample, rows in samples.items():
        kind = _bare(sample)
        if kind not in (FALLBACK_METRIC.lower(), BATCHES_METRIC.lower()):
            continue
        for labels, value in rows:
            name = next((labels[key] for key in MODEL_LABELS if labels.get(key)), None)
            if not name:
                continue
            if kind == FALLBACK_METRIC.lower():
                fallbacks[name] = fallbacks.get(name, 0) + int(value)
            elif str(labels.get(SIZE_DIMENSION, "")).isdigit():
                formed = sizes.setdefault(name, {})
                size = int(labels[SIZE_DIMENSION])
                formed[size] = formed.get(size, 0) + int(value)
    names = sorted({*fallbacks, *sizes})
    return {n: ModelMetrics(fallbacks=fallbacks.get(n, 0), sizes=sizes.get(n, {})) for n in names}


def served_metrics(server: Engine) -> dict[str, ModelMetrics]:
    """Model name -> its record; {} when the metrics cannot be read (a status line must still show the rest): the
    engine's error, or its metrics address not answering."""
    try:
        return server.metrics()
    except (MsnbError, OSError, requests.RequestException):
        return {}


def batch_fallbacks(server: Engine) -> dict[str, int]:
    """Model name -> batch fallbacks its workers counted (``served_metrics``)."""
    return {name: record.fallbacks for name, record in served_metrics(server).items()}


def _bare(sample: str) -> str:
    return sample.removeprefix("ray_").removesuffix("_total").lower()


__all__ = ["ModelMetrics", "Samples", "batch_fallbacks", "parse", "per_model", "served_metrics"]
