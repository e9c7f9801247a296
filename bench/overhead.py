"""Benchmark 5, in-process handler overhead: the shared handler's handle() on a batch of 8 vs the raw forward."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
import ts
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from bench import models
from bench.harness import Settings, interleave, summary
from msnb.package.model_folder import ModelFolder
from msnb.trial.runner import LoadedHandler

BATCH = 8


def run(settings: Settings) -> dict:
    work = settings.workdir / "overhead"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "model.pt")
    spec = models.mlp_spec("overhead", models.SMALL, checkpoint, batch_size=BATCH)
    handler = LoadedHandler(spec, ModelFolder.stage(spec, work / "model", temporary=True).path)
    _with_server_metrics(handler)
    handle, context = handler.module.handle, handler.context
    model, pre, post = handle.model, handle.preprocess, handle.postprocess
    requests = [{"body": models.SAMPLE} for _ in range(BATCH)]
    batch = torch.stack([pre(r["body"]) for r in requests])

    def raw() -> None:
        with torch.inference_mode():
            model(batch)

    def by_hand() -> None:  # what the hand-written handler does: preprocess, one forward, postprocess
        with torch.inference_mode():
            [post(o) for o in model(torch.stack([pre(r["body"]) for r in requests]))]

    iterations = settings.size(2000, 300, 20)
    calls = {
        "msnb handle()": lambda: handle(requests, context),
        "hand-written pre+forward+post": by_hand,
        "raw model(batch)": raw,
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a shared 2-core machine, intra-op threads spin against other processes
    try:
        results = interleave({name: _per_call(fn, iterations) for name, fn in calls.items()}, settings.reps)
    finally:
        torch.set_num_threads(threads)
        handler.close()
    return report({name: summary(values) for name, values in results.items()})


def _with_server_metrics(handler: LoadedHandler) -> None:
    """Give the context the metrics cache a TorchServe worker has, so handle() pays for its metrics too."""
    cache = MetricsCacheYamlImpl(config_file_path=str(Path(ts.__file__).parent / "configs" / "metrics.yaml"))
    cache.initialize_cache()
    handler.context.metrics = cache
    logging.getLogger("ts.metrics").setLevel(logging.WARNING)


def _per_call(fn, iterations: int):
    """A measurement: mean microseconds per call over ``iterations`` calls (after a few warm-up calls)."""

    def measure() -> float:
        for _ in range(20):
            fn()
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        return (time.perf_counter() - start) / iterations * 1e6

    return measure


def report(stats: dict) -> dict:
    handle, raw = stats["msnb handle()"]["median"], stats["raw model(batch)"]["median"]
    by_hand = stats["hand-written pre+forward+post"]["median"]
    per_sample = (handle - raw) / BATCH
    own = (handle - by_hand) / BATCH
    return {
        "title": f"5. In-process handler overhead (batch of {BATCH}, small MLP)",
        "unit": "µs per call",
        "rows": stats,
        "ratios": {"overhead vs raw forward, µs/sample": per_sample, "overhead vs hand-written loop, µs/sample": own},
        "targets": [
            {
                "target": "handle() overhead <= 50 µs per sample (vs raw forward)",
                "value": f"{per_sample:.1f} µs/sample",
                "met": per_sample <= 50.0,
            }
        ],
        "notes": "One torch thread. handle() on 8 JSON-decoded requests with TorchServe's own Context and metrics cache, vs the "
        "raw forward on the already-stacked batch, and vs the same user preprocess/postprocess called "
        "by hand (msnb's own machinery: per-sample isolation, collate/split, JSON-safety, metrics).",
    }
