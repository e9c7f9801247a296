"""What each served model's batching did, from its engine's metrics: the batches the server formed, by size, and the
batch fallbacks it took (a batched forward retried one sample at a time). Both engines answer ``metrics()`` in
TorchServe's shape (sample name -> [(labels, value)]): TorchServe from its metrics address, Ray Serve from its nodes'
metrics ports, translated (``msnb.engines.ray.metrics``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from msnb.engines.protocol import Engine
from msnb.templates.msnb_runtime.handler.fallback import FALLBACK_METRIC
from msnb.templates.msnb_runtime.handler.metrics import BATCHES_METRIC, SIZE_DIMENSION

_MODEL_LABELS = ("ModelName", "model_name")  # TorchServe's handler metrics, and Ray's translated ones


@dataclass
class Batching:
    """One model's batches the server formed (batch size -> how many) and its batch fallbacks."""

    sizes: dict[int, int] = field(default_factory=dict)
    fallbacks: int = 0

    def line(self) -> str:
        """``batches formed: size 4 ×3, size 1 ×2; 1 batch fallback (see %ms_logs)``; empty when nothing is known."""
        said = []
        if self.sizes:
            formed = ", ".join(f"size {s} ×{n}" for s, n in sorted(self.sizes.items(), reverse=True))
            said.append(f"batches formed: {formed}")
        if self.fallbacks:
            said.append(f"{self.fallbacks} batch fallback{'s' if self.fallbacks > 1 else ''} (see %ms_logs)")
        return "; ".join(said)


def batching(server: Engine) -> dict[str, Batching]:
    """Model name -> what its batching did (the shared handler's ``MsnbBatches`` and ``MsnbBatchFallback``); {}
    when the engine's metrics cannot be read (a status must still show the rest)."""
    try:
        metrics = server.metrics()
    except Exception:  # a status line, never a failure of its own
        return {}
    found: dict[str, Batching] = {}
    for sample, rows in metrics.items():
        kind = sample.removesuffix("_total").lower()
        if kind not in (FALLBACK_METRIC.lower(), BATCHES_METRIC.lower()):
            continue
        for labels, value in rows:
            name = next((labels[k] for k in _MODEL_LABELS if labels.get(k)), None)
            if name is None:
                continue
            model = found.setdefault(name, Batching())
            if kind == FALLBACK_METRIC.lower():
                model.fallbacks += int(value)
            elif str(labels.get(SIZE_DIMENSION, "")).isdigit():
                size = int(labels[SIZE_DIMENSION])
                model.sizes[size] = model.sizes.get(size, 0) + int(value)
    return found


def parse_metrics(text: str) -> dict[str, list[tuple[dict, float]]]:
    """Prometheus text, parsed: sample name -> [(labels, value), ...] (what an engine's ``metrics()`` answers)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out
