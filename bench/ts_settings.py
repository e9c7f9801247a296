"""Benchmark 10, TorchServe settings one by one: the tiny MLP at 16 clients under each, interleaved; req/s, p50/p99, PSS.

Each variant is a LocalServer whose config.properties differs from msnb's defaults by the named entries; the
servers run side by side and the load visits them in turn, so machine noise spreads over all of them.
"""

from __future__ import annotations

import json

import psutil

from bench import models
from bench.beside_litserve import pss_mib
from bench.harness import Settings, interleave, load, summary
from msnb.engines.torchserve import LocalServer
from msnb.engines.torchserve.config import DEFAULT_VMARGS, FORK_JOIN_THREADS, FRONTEND_THREADS
from msnb.session.reload import Reloads

# msnb's settings, then each with one of them put back to TorchServe's / the JVM's default (an ablation).
VARIANTS = {
    "msnb defaults": {},
    "TorchServe defaults (all three back)": {"vmargs": "", "number_of_netty_threads": 0, "netty_client_threads": 0},
    "G1 heap (no vmargs)": {"vmargs": ""},
    "C2 JIT on": {"vmargs": DEFAULT_VMARGS.replace(" -XX:TieredStopAtLevel=1", "")},
    "Netty threads default": {"number_of_netty_threads": 0, "netty_client_threads": 0},
    "a thread per request (ForkJoinPool default)": {"vmargs": DEFAULT_VMARGS.replace(f" {FORK_JOIN_THREADS}", "")},
}

QUICK = ("msnb defaults", "TorchServe defaults (all three back)")  # the quick run: the two ends only
SMOKE = QUICK[:1]  # the smoke run: one server


def run(settings: Settings) -> dict:
    work = settings.workdir / "ts_settings"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "tiny.pt")
    variants = {k: VARIANTS[k] for k in settings.size(VARIANTS, QUICK, SMOKE)}
    servers = {name: LocalServer(work / f"v{i}", properties=props) for i, (name, props) in enumerate(variants.items())}
    total = settings.size(2000, 400, 32)
    body = json.dumps(models.SAMPLE).encode()
    try:
        loads = {}
        for name, server in servers.items():
            Reloads().serve(server.start(), models.mlp_spec("m", models.SMALL, checkpoint))
            key = json.loads(server.layout.key_file.read_text())["inference"]["key"]
            url, headers = f"{server.inference_url}/predictions/m", {"Authorization": f"Bearer {key}"}
            loads[name] = lambda url=url, headers=headers: load(url, body, total, 16, headers, wall_cap=60)
            loads[name]()  # warm-up, not measured
        runs = interleave(loads, settings.reps)
        pss = {name: pss_mib(psutil.Process(server.pid)) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    rows = {
        name: {m.replace("_", " "): summary([r[m] for r in results]) for m in ("rps", "p50_ms", "p99_ms")}
        | {"PSS after load MiB": summary([pss[name]]), "errors": sum(r["errors"] for r in results)}
        for name, results in runs.items()
    }
    return report(rows, settings)


def report(rows: dict, settings: Settings) -> dict:
    base = rows["msnb defaults"]
    ratios = {
        f"{name} / msnb defaults: {metric}": row[metric]["median"] / base[metric]["median"]
        for name, row in rows.items()
        if name != "msnb defaults"
        for metric in ("rps", "p99 ms", "PSS after load MiB")
    }
    return {
        "title": "10. TorchServe settings, one at a time (tiny MLP, 16 clients)",
        "unit": "see each row",
        "rows": rows,
        "ratios": ratios,
        "notes": f"{settings.size('', 'quick mode (msnb and TorchServe defaults only): ', 'smoke mode: ')}msnb defaults: vmargs `{DEFAULT_VMARGS}`, "
        f"{FRONTEND_THREADS}; each other variant puts the named setting back to its default (vmargs empty: the JVM's "
        "own G1 and heap sizing; 0 Netty threads: Netty's 2 per core). One worker each; the servers run side by side "
        "and the rounds are interleaved.",
    }
