"""Benchmark 4, serving throughput and latency on loopback: msnb vs a hand-written handler, and batching sweeps."""

from __future__ import annotations

import json
from pathlib import Path

from bench import models
from bench.anchors import archive_cli
from bench.harness import Settings, interleave, load, msnb_engine, stop_engine, summary
from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy

BATCHES = [(1, 0)] + [(b, d) for b in (4, 8, 16) for d in (1, 5, 20)]
QUICK_BATCHES = [(1, 0), (8, 5), (16, 20)]
SMOKE_BATCHES = [(1, 0), (8, 5)]  # batch 1 and one batched point


def run(settings: Settings) -> dict:
    work = settings.workdir / "throughput"
    work.mkdir(parents=True, exist_ok=True)
    server = msnb_engine("torchserve", work, settings)
    try:
        server.start()
        handlers = _handler_comparison(settings, server, work)
        batching = _batching_sweep(settings, server, work)
    finally:
        stop_engine(server, settings)
    return report(handlers, batching, settings)


def _load_fn(server: LocalServer, name: str, requests: int, clients: int):
    key = json.loads(server.layout.key_file.read_text())["inference"]["key"]
    body = json.dumps(models.SAMPLE).encode()
    url = f"{server.inference_url}/predictions/{name}"
    return lambda: load(url, body, requests, clients, {"Authorization": f"Bearer {key}"}, wall_cap=60)


def _handler_comparison(settings: Settings, server: LocalServer, work: Path) -> dict:
    """4a: the same small MLP behind msnb's shared handler and a minimal hand-written one, batch 1."""
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "small.pt")
    deploy(server, models.mlp_spec("small_msnb", models.SMALL, checkpoint), batch_size=1)
    handler = work / "handwritten.py"
    handler.write_text(models.handwritten_source(models.mlp_source(), models.SMALL))
    archive_cli("small_handwritten", handler, checkpoint, server.model_store, work / "archiver.log")
    server.register(server.model_store / "small_handwritten.mar", batch_size=1)
    total = settings.size(3000, 300, 32)
    per_round = total // settings.reps
    for name in ("small_msnb", "small_handwritten"):  # warm-up, not measured
        _load_fn(server, name, 50, 16)()
    runs = interleave(
        {
            "msnb shared handler": _load_fn(server, "small_msnb", per_round, 16),
            "hand-written handler": _load_fn(server, "small_handwritten", per_round, 16),
        },
        settings.reps,
    )
    for name in ("small_msnb", "small_handwritten"):
        server.unregister(name)
    return _summarise(runs)


def _batching_sweep(settings: Settings, server: LocalServer, work: Path) -> dict:
    """4b: the compute-bound wide MLP at batch size / max delay pairs, at 16 clients and at low concurrency."""
    checkpoint = models.save_mlp_checkpoint(models.WIDE, work / "wide.pt")
    configs = settings.size(BATCHES, QUICK_BATCHES, SMOKE_BATCHES)
    for batch, delay in configs:
        spec = models.mlp_spec(_name(batch, delay), models.WIDE, checkpoint, batch_size=batch, max_batch_delay=delay)
        deploy(server, spec, batch_size=batch, max_batch_delay=delay)
    out = {}
    for clients, total in ((16, 1500), (4, 300), (1, 100)):
        total = settings.size(total, max(20, total // 5), 2 * clients)
        for batch, delay in configs:  # warm-up
            _load_fn(server, _name(batch, delay), 2 * clients, clients)()
        runs = interleave(
            {_label(b, d): _load_fn(server, _name(b, d), total // settings.reps, clients) for b, d in configs},
            settings.reps,
        )
        out[clients] = _summarise(runs)
    return out


def _name(batch: int, delay: int) -> str:
    return f"wide_b{batch}_d{delay}"


def _label(batch: int, delay: int) -> str:
    return "batch 1" if batch == 1 else f"batch {batch} / {delay} ms"


def _summarise(runs: dict[str, list[dict]]) -> dict:
    return {
        name: {metric: summary([r[metric] for r in results]) for metric in ("rps", "p50_ms", "p99_ms")}
        | {"errors": sum(r["errors"] for r in results), "requests": sum(r["requests"] for r in results)}
        for name, results in runs.items()
    }


def report(handlers: dict, batching: dict, settings: Settings) -> dict:
    msnb, hand = handlers["msnb shared handler"]["rps"], handlers["hand-written handler"]["rps"]
    rel = msnb["median"] / hand["median"]
    at16 = batching[16]
    best = max((n for n in at16 if n != "batch 1"), key=lambda n: at16[n]["rps"]["median"])
    gain = at16[best]["rps"]["median"] / at16["batch 1"]["rps"]["median"]
    hurts = [
        f"{c} client(s): {n} {v['rps']['median']:.0f} req/s vs batch 1 {batching[c]['batch 1']['rps']['median']:.0f}"
        for c in (1, 4)
        for n, v in batching[c].items()
        if n != "batch 1" and v["rps"]["median"] < batching[c]["batch 1"]["rps"]["median"]
    ]
    return {
        "title": "4. Serving throughput and latency (loopback, token auth on)",
        "unit": "req/s",
        "rows": {"handlers": handlers, "batching": {f"{c} clients": v for c, v in batching.items()}},
        "ratios": {"msnb / hand-written (batch 1, 16 clients)": rel, f"{best} / batch 1 (16 clients)": gain},
        "targets": [
            {"target": "msnb >= 0.95x hand-written handler, batch 1", "value": f"{rel:.2f}x", "met": rel >= 0.95},
            {
                "target": "batching >= 2x batch 1 at 16 clients (wide MLP)",
                "value": f"{gain:.2f}x ({best})",
                "met": gain >= 2.0,
            },
        ],
        "batching_hurts": hurts,
        "notes": f"{settings.mode}one worker per model on one LocalServer; "
        "rounds of the variants interleaved; the load generator (keep-alive http.client threads) "
        "shares the 2 cores with TorchServe. 4a: MLP 64-256-256-10; 4b: MLP 64-2048x3-10.",
    }
