"""Benchmark 1, the warm inner loop: a handler changes -> the new code answers; msnb's reload in the live worker,
its versioned redeploy, and the manual CLI loop."""

from __future__ import annotations

import itertools
from pathlib import Path

from bench import models
from bench.anchors import ManualTorchServe, archive_cli
from bench.harness import Settings, interleave, msnb_engine, ratio, stop_engine, summary, timed
from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy
from msnb.session.reload import RELOAD, Reloads

NAME, DEV_NAME = "inner", "inner_dev"  # the redeployed model and the reloaded one (both on one server in a smoke run)


def run(settings: Settings) -> dict:
    work = settings.workdir / "inner_loop"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "model.pt")
    server, manual = msnb_engine("torchserve", work, settings), ManualTorchServe(work / "manual")
    # the reloaded model's server: its own, or in a smoke run the shared TorchServe beside NAME (one start fewer)
    dev, reloads = server if settings.smoke else LocalServer(work / "dev"), Reloads()
    revisions = itertools.count(1)
    try:
        server.start()
        deploy(server, models.mlp_spec(NAME, models.SMALL, checkpoint))
        reloads.serve(dev.start(), models.mlp_spec(DEV_NAME, models.SMALL, checkpoint))
        _manual_deploy(manual, work, checkpoint, 0, restart=False)
        times = interleave(
            {
                "msnb reload": lambda: timed(lambda: _msnb_reload(dev, reloads, checkpoint, next(revisions))),
                "msnb redeploy": lambda: timed(lambda: _msnb_deploy(server, checkpoint, next(revisions))),
                "manual CLI loop": lambda: timed(lambda: _manual_deploy(manual, work, checkpoint, next(revisions))),
            },
            settings.reps,
        )
    finally:
        if dev is not server:
            dev.stop()
        stop_engine(server, settings)
        manual.close()
    return report({name: summary(values) for name, values in times.items()})


def _msnb_deploy(server: LocalServer, checkpoint: Path, revision: int) -> None:
    """What %%ms_handler + %ms_serve do after an edit: a new spec, redeployed, then one prediction."""
    deploy(server, models.mlp_spec(NAME, models.SMALL, checkpoint, revision=revision))
    _check(server.predict(NAME, models.SAMPLE), revision)


def _msnb_reload(server: LocalServer, reloads: Reloads, checkpoint: Path, revision: int) -> None:
    """What %ms_serve does after a code-only edit on the notebook's server: a reload in the live worker."""
    reloads.serve(server, models.mlp_spec(DEV_NAME, models.SMALL, checkpoint, revision=revision))
    if reloads.models[DEV_NAME].redeploy != RELOAD:
        raise RuntimeError(f"expected a reload, got {reloads.models[DEV_NAME].row()}")
    _check(server.predict(DEV_NAME, models.SAMPLE), revision)


def _manual_deploy(manual: ManualTorchServe, work: Path, checkpoint: Path, revision: int, restart: bool = True) -> None:
    """Edit handler.py, torch-model-archiver, torchserve --stop/--start, register, predict."""
    handler = work / "handler.py"
    handler.write_text(models.handwritten_source(models.mlp_source(revision), models.SMALL))
    archive_cli(NAME, handler, checkpoint, manual.store, work / "archiver.log")
    if restart:
        manual.stop()
    manual.start()
    manual.register(f"{NAME}.mar")
    _check(manual.predict(NAME, models.SAMPLE), revision)


def _check(answer: dict, revision: int) -> None:
    if answer.get("revision") != revision:  # a correctness check of what is timed, not a timed assertion
        raise RuntimeError(f"expected the answer of revision {revision}, got {answer}")


def report(stats: dict) -> dict:
    msnb, manual, fast = stats["msnb redeploy"], stats["manual CLI loop"], stats["msnb reload"]
    speedup, reload_speedup = ratio(manual, msnb), ratio(manual, fast)
    return {
        "title": "1. Warm inner loop (handler edit -> new code answers)",
        "unit": "s",
        "rows": stats,
        "ratios": {"manual / msnb redeploy": speedup, "manual / msnb reload": reload_speedup},
        "targets": [
            {"target": "msnb redeploy <= 2 s median", "value": f"{msnb['median']:.2f} s", "met": msnb["median"] <= 2.0},
            {"target": ">= 3x faster than the manual loop", "value": f"{speedup:.1f}x", "met": speedup >= 3.0},
            {"target": "msnb reload <= 0.3 s median", "value": f"{fast['median']:.2f} s", "met": fast["median"] <= 0.3},
            {
                "target": "msnb reload >= 12x faster than the manual loop",
                "value": f"{reload_speedup:.1f}x",
                "met": reload_speedup >= 12.0,
            },
        ],
        "notes": "Same small MLP and checkpoint for all. msnb reload: a code-only edit served the way %ms_serve "
        "does (the live worker loads the new generation; docs/edit-loop.md) + predict. "
        "msnb redeploy: LocalServer.redeploy (no-archive build, register "
        "the new version, set-default, unregister the old) + predict. Manual: torch-model-archiver CLI "
        "(default .mar), torchserve --stop (waiting until Java and workers exit), --start, register, "
        "predict; token auth on (key read from key_file.json).",
    }
