"""Benchmark 6, explanation latency: Integrated Gradients (default step count) for the small MLP, in-process and
served, beside a prediction on the same path."""

from __future__ import annotations

import os
import time

from bench import models
from bench.harness import Settings, interleave, summary
from msnb.engines.torchserve import LocalServer
from msnb.package.model_folder import ModelFolder
from msnb.session.deployment import deploy
from msnb.templates.msnb_runtime.handler.explain_budget import SHARE_ENV
from msnb.trial.runner import LoadedHandler

NAME = "explain"
PREDICT, EXPLAIN = "predict (anchor)", "explain: integrated gradients"


def run(settings: Settings) -> dict:
    work = settings.workdir / "explain"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "model.pt")
    spec = models.mlp_spec(NAME, models.SMALL, checkpoint)
    # Explanation latency alone: the explanation pacing (msnb_runtime.handler.explain_budget) is off, in-process and on the server.
    os.environ[SHARE_ENV] = "1"
    handler = LoadedHandler(spec, ModelFolder.stage(spec, work / "model", temporary=True).path)
    calls = settings.size(100, 20, 2)
    try:
        with LocalServer(work / "server") as server:
            deploy(server, spec)
            variants = {
                ("in-process", PREDICT): lambda: _check(handler.run([models.SAMPLE])[0].body),
                ("in-process", EXPLAIN): lambda: _check(handler.run([models.SAMPLE], explain=True)[0].body),
                ("served", PREDICT): lambda: _check(server.predict(NAME, models.SAMPLE)),
                ("served", EXPLAIN): lambda: _check(server.explain(NAME, models.SAMPLE)),
            }
            results = interleave({key: _per_call(fn, calls) for key, fn in variants.items()}, settings.reps)
    finally:
        handler.close()
        os.environ.pop(SHARE_ENV, None)
    return report({key: summary(values) for key, values in results.items()})


def _check(answer: dict) -> dict:
    """Only answers count: an error would be measured as a (fast) explanation."""
    if "label" not in answer and abs(answer.get("delta", 1.0)) > 0.05:
        raise AssertionError(f"not an answer: {answer}")
    return answer


def _per_call(fn, calls: int):
    """A measurement: mean milliseconds per request over ``calls`` sequential requests (after 3 warm-up calls)."""

    def measure() -> float:
        for _ in range(3):
            fn()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1000

    return measure


def report(stats: dict) -> dict:
    rows: dict = {}
    for (where, what), s in stats.items():
        rows.setdefault(where, {})[what] = s
    ratios = {
        f"explain / predict, {where}": rows[where][EXPLAIN]["median"] / rows[where][PREDICT]["median"] for where in rows
    }
    return {
        "title": "6. Explanation latency (small MLP 64->256->256->10, Integrated Gradients, 50 steps)",
        "unit": "ms per request",
        "rows": rows,
        "ratios": ratios,
        "notes": "One sample per request, sequential. Explain: Captum's Integrated Gradients on the predicted "
        "class from an all-zeros baseline at the default 50 steps (one forward for the target, a forward and "
        "backward over 50 scaled inputs, a forward of the baseline), through the shared handler's explain path. "
        "In-process: LoadedHandler.run with TorchServe's own Context; served: POST /explanations vs "
        "/predictions on a LocalServer (batch size 1, token auth on).",
    }
