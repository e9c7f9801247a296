"""Benchmark: the same model folder and client on TorchServe (LocalServer) and on Ray Serve (one replica, then two):
cold start to the first answer, a warm redeploy, and throughput with p50/p99 at 16 clients with batching."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench import models
from bench.harness import Settings, load, msnb_engine, stop_engine, summary
from msnb.session.deployment import deploy

NAME = "raybench"
BATCH, DELAY_MS, CLIENTS = 8, 5, 16


def run(settings: Settings) -> dict:
    work = settings.workdir / "ray_serve"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.WIDE, work / "wide.pt")
    total = settings.size(1500, 300, CLIENTS)
    results = {"TorchServe (1 worker)": _measure("torchserve", 1, checkpoint, total, work, settings)}
    for replicas in settings.size((1, 2), (1, 2), (1,)):  # a smoke run: one Ray start
        results[f"Ray Serve ({replicas} replica{'s' * (replicas > 1)})"] = _measure(
            "ray", replicas, checkpoint, total, work, settings
        )
    return report(results, settings)


def _spec(checkpoint: Path, workers: int, revision: int = 0):
    return models.mlp_spec(
        NAME, models.WIDE, checkpoint, revision, batch_size=BATCH, max_batch_delay=DELAY_MS, workers=workers
    )


def _measure(kind: str, workers: int, checkpoint: Path, total: int, work: Path, settings: Settings) -> dict:
    """Cold start (engine start, deploy, first answer), a warm redeploy, then 16 clients."""
    start = time.perf_counter()
    engine = msnb_engine(kind, work, settings)
    try:
        engine.start()
        started = time.perf_counter() - start
        deploy(engine, _spec(checkpoint, workers))
        deployed = time.perf_counter() - start
        engine.predict(NAME, models.SAMPLE)
        first = time.perf_counter() - start
        mark = time.perf_counter()
        deploy(engine, _spec(checkpoint, workers, revision=1))
        redeploy = time.perf_counter() - mark
        _load(engine, 2 * CLIENTS)  # warm-up
        measured = _load(engine, total)
    finally:
        stop_engine(engine, settings)
    return {
        "engine start": started,
        "deploy": deployed - started,
        "cold start to first answer": first,
        "warm redeploy": redeploy,
        **measured,
    }


def _load(engine, total: int) -> dict:
    headers = {}
    if engine.key_file is not None:  # both engines ask for the inference key (the Engine protocol's key_file)
        key = json.loads(engine.key_file.read_text())["inference"]["key"]
        headers = {"Authorization": f"Bearer {key}"}
    url = f"{engine.inference_url}/predictions/{NAME}"
    return load(url, json.dumps(models.SAMPLE).encode(), total, CLIENTS, headers, wall_cap=120)


def report(results: dict, settings: Settings) -> dict:
    ts = results["TorchServe (1 worker)"]
    ray1 = results["Ray Serve (1 replica)"]
    ratios = {
        f"{name} / TorchServe: {metric}": row[metric] / ts[metric]
        for name, row in results.items()
        if name != "TorchServe (1 worker)"
        for metric in ("cold start to first answer", "warm redeploy", "rps", "p50_ms", "p99_ms")
    }
    return {
        "title": "Ray Serve beside TorchServe (same model folder, same client)",
        "unit": "s / req/s / ms",
        "rows": {name: {k: summary([v]) for k, v in row.items()} for name, row in results.items()},
        "ratios": ratios,
        "cold_start_parts": {
            "Ray start (one node + Serve + router)": ray1["engine start"],
            "Ray deploy": ray1["deploy"],
        },
        "notes": f"{settings.mode}one run each; wide MLP 64-2048x3-10, batch {BATCH} / "
        f"{DELAY_MS} ms, {CLIENTS} keep-alive clients on loopback sharing the 2 cores with the engine. Ray: a "
        "one-node local Ray (no dashboard) owned by the process, replicas of 0.5 CPU; TorchServe: token auth on.",
    }
