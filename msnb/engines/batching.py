"""How many batch fallbacks (a batched forward retried one sample at a time) each served model counted."""

from __future__ import annotations

from msnb.engines.protocol import Engine
from msnb.templates.msnb_runtime.handler.fallback import FALLBACK_METRIC


def batch_fallbacks(server: Engine) -> dict[str, int]:
    """Model name -> batch fallbacks its workers counted (the shared handler's custom metric); {} when the
    metrics cannot be read (status must still show the rest)."""
    try:
        metrics = server.metrics()
    except Exception:  # a status line, never a failure of its own
        return {}
    counts: dict[str, int] = {}
    for sample, rows in metrics.items():
        if sample.removesuffix("_total") != FALLBACK_METRIC:
            continue
        for labels, value in rows:
            name = labels.get("ModelName")
            if name:
                counts[name] = counts.get(name, 0) + int(value)
    return counts
