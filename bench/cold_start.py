"""Benchmark 2, the cold loop: no server -> first prediction, and stop -> every process gone; msnb vs the manual CLI."""

from __future__ import annotations

import itertools
import shutil
import time
from pathlib import Path

import psutil

from bench import models
from bench.anchors import ManualTorchServe, archive_cli
from bench.harness import Settings, interleave, ratio, summary, wait_gone
from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy

NAME = "cold"


def run(settings: Settings) -> dict:
    work = settings.workdir / "cold_start"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "model.pt")
    handler = work / "handler.py"
    handler.write_text(models.handwritten_source(models.mlp_source(), models.SMALL))
    counter = itertools.count()
    results = interleave(
        {
            "msnb": lambda: _msnb_cold(work / f"msnb{next(counter)}", checkpoint),
            "manual CLI": lambda: _manual_cold(work / f"manual{next(counter)}", handler, checkpoint),
        },
        settings.reps,
    )
    stats = {
        f"{variant}: {phase}": summary([r[phase] for r in runs])
        for variant, runs in results.items()
        for phase in runs[0]
    }
    return report(stats)


def _msnb_cold(workdir: Path, checkpoint: Path) -> dict[str, float]:
    """LocalServer().start(), register(spec), predict; then stop() until Java and workers are gone."""
    start = time.perf_counter()
    server = LocalServer(workdir)
    try:
        server.start()
        healthy = time.perf_counter() - start
        deploy(server, models.mlp_spec(NAME, models.SMALL, checkpoint))
        registered = time.perf_counter() - start
        server.predict(NAME, models.SAMPLE)
        first = time.perf_counter() - start
        procs = _tree(server.pid)
        start = time.perf_counter()
        server.stop()
        wait_gone(procs)
        return {
            "first prediction": first,
            "stop": time.perf_counter() - start,
            "start -> healthy": healthy,
            "register": registered - healthy,
        }
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _manual_cold(workdir: Path, handler: Path, checkpoint: Path) -> dict[str, float]:
    """torch-model-archiver, torchserve --start, register, predict; then torchserve --stop until all exited."""
    start = time.perf_counter()
    manual = ManualTorchServe(workdir)
    try:
        archive_cli(NAME, handler, checkpoint, manual.store, workdir / "archiver.log")
        manual.start()
        manual.register(f"{NAME}.mar")
        manual.predict(NAME, models.SAMPLE)
        first = time.perf_counter() - start
        start = time.perf_counter()
        manual.stop()  # returns once Java and its workers have exited
        return {"first prediction": first, "stop": time.perf_counter() - start}
    finally:
        manual.close()


def _tree(pid: int | None) -> list[psutil.Process]:
    if pid is None:
        return []
    java = psutil.Process(pid)
    return [java, *java.children(recursive=True)]


def report(stats: dict) -> dict:
    msnb, manual = stats["msnb: first prediction"], stats["manual CLI: first prediction"]
    return {
        "title": "2. Cold loop (no server -> first prediction; stop -> all processes gone)",
        "unit": "s",
        "rows": stats,
        "ratios": {
            "manual / msnb (first prediction)": ratio(manual, msnb),
            "manual / msnb (stop)": ratio(stats["manual CLI: stop"], stats["msnb: stop"]),
        },
        "targets": [
            {
                "target": "msnb cold start -> first prediction <= 4 s median",
                "value": f"{msnb['median']:.2f} s",
                "met": msnb["median"] <= 4.0,
            }
        ],
        "notes": "msnb: LocalServer(...).start() (Java check, config, launch, /ping), register(spec) (no-archive "
        "build + synchronous register), predict. Manual: archiver CLI, torchserve --start, poll /ping, "
        "register, predict. Stop: until Java and every worker process has exited. "
        "msnb's start -> healthy and register are the two parts of its first prediction.",
    }
