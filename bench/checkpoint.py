"""Benchmark 3, large checkpoints: build + register time and the build's peak memory, msnb dev formats vs default .mar."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from bench import models
from bench.anchors import archive_cli
from bench.harness import Settings, interleave, msnb_engine, run_child, stop_engine, summary, timed
from msnb.engines.torchserve import LocalServer

ROOT = Path(__file__).resolve().parents[1]
# variant -> (how it is built, what a user runs to get it)
VARIANTS = {
    "default .mar (torch-model-archiver CLI)": "mar-cli",
    "msnb no-archive (register/redeploy)": "no-archive",
    "msnb zip-store (build --dev, validated)": "zip-store",
}


def run(settings: Settings) -> dict:
    work = settings.workdir / "checkpoint"
    work.mkdir(parents=True, exist_ok=True)
    sizes = settings.size([(100, 5), (1024, 3)], [(16, 2)], [(1, 1)])  # (MiB, repetitions)
    server = msnb_engine("torchserve", work, settings)
    out = {}
    try:
        server.start()
        baseline = run_child(
            [sys.executable, "-m", "bench.checkpoint", "baseline"], work / "baseline.log", cwd=ROOT, peak=True
        )
        for mib, reps in sizes:
            checkpoint = models.save_random_blob(mib, work / f"blob{mib}.pt")
            handler = work / "handler.py"
            handler.write_text(models.handwritten_source(models.BLOB_SOURCE, {"mib": mib}))
            runs = interleave(
                {label: _variant(server, kind, mib, checkpoint, handler, work) for label, kind in VARIANTS.items()},
                reps,
            )
            out[f"{mib} MiB"] = {label: {k: summary([r[k] for r in rs]) for k in rs[0]} for label, rs in runs.items()}
            checkpoint.unlink()
    finally:
        stop_engine(server, settings)
        shutil.rmtree(work, ignore_errors=True)
    return report(out, baseline["peak_rss_mib"], settings)


def _variant(server: LocalServer, kind: str, mib: int, checkpoint: Path, handler: Path, work: Path):
    name = f"blob_{kind.replace('-', '_')}"

    def measure() -> dict[str, float]:
        log = work / f"{name}.log"
        if kind == "mar-cli":
            built = archive_cli(name, handler, checkpoint, server.model_store, log, peak=True)
            path = server.model_store / f"{name}.mar"
        else:
            cmd = [
                sys.executable,
                "-m",
                "bench.checkpoint",
                "build",
                kind,
                name,
                str(mib),
                str(checkpoint),
                str(server.model_store),
            ]
            built = run_child(cmd, log, cwd=ROOT, peak=True)
            built["seconds"] = float(log.read_text().split()[-1])  # build() alone, not the child's imports
            path = server.model_store / (f"{name}.mar" if kind == "zip-store" else name)
        register = timed(lambda: server.register(path))
        server.unregister(name)  # also deletes it from the model store
        return {
            "build s": built["seconds"],
            "register s": register,
            "total s": built["seconds"] + register,
            "build peak MiB": built["peak_rss_mib"],
        }

    return measure


def _build_child(kind: str, name: str, mib: str, checkpoint: str, store: str) -> None:
    """In a fresh process: build ``kind`` the way msnb does (validation only where msnb validates)."""
    from msnb.package.archive import build
    from msnb.trial.runner import validate

    spec = models.blob_spec(name, int(mib), Path(checkpoint))

    def build_as_msnb() -> None:
        if kind == "zip-store":  # Session.build validates before packing; deploy (no-archive) does not
            validate(spec)
        build(spec, Path(store), fmt=kind, archive_name=name)

    seconds = timed(build_as_msnb)
    print(f"build_seconds {seconds}")


def report(out: dict, baseline_mib: float, settings: Settings) -> dict:
    targets, ratios = [], {}
    for size, rows in out.items():
        mib = float(size.split()[0])
        default = rows["default .mar (torch-model-archiver CLI)"]["total s"]["median"]
        for label in list(VARIANTS)[1:]:
            speed = default / rows[label]["total s"]["median"]
            ratios[f"{size}: default / {label} (build + register)"] = speed
            targets.append(
                {
                    "target": f"{size}: {label} >= 8x faster than default .mar",
                    "value": f"{speed:.1f}x",
                    "met": speed >= 8.0,
                }
            )
            own = rows[label]["build peak MiB"]["median"] - baseline_mib
            targets.append(
                {
                    "target": f"{size}: {label} build peak <= 1.2x checkpoint",
                    "value": f"{own:.0f} MiB above the import baseline = {own / mib:.2f}x",
                    "met": own <= 1.2 * mib,
                }
            )
    return {
        "title": "3. Large checkpoint (random state_dict): build + register, build peak memory",
        "unit": "s / MiB",
        "rows": out,
        "ratios": ratios,
        "targets": targets,
        "baseline_peak_mib": baseline_mib,
        "notes": f"{'quick mode (small checkpoint); ' if settings.quick else ''}builds run in a child process "
        "(msnb's build time is build() itself, without the child's imports; the CLI's is its whole run); "
        f"peak = the child's max RSS; a child that only imports msnb.package.archive and torch peaks at "
        f"{baseline_mib:.0f} MiB (subtracted for the ratio). Register = LocalServer.register of the "
        "built artefact (synchronous, one worker loads the weights).",
    }


if __name__ == "__main__":
    if sys.argv[1] == "baseline":
        import msnb.package.archive  # (the same imports as a build, nothing built)
        import msnb.trial.runner  # noqa: F401
    else:
        _build_child(*sys.argv[2:])
