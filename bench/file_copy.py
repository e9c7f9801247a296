"""Benchmark: private checkpoint copies, what the served model dir's own copy of the checkpoint costs a build.

A served model dir holds a private copy of the checkpoint (a copy-on-write clone on btrfs/xfs, an in-kernel
``copy_file_range`` copy on ext4) and the build hashes it once (sha256, what a stale check compares), so a
later ``torch.save`` to the notebook's path changes nothing that is served. Before, the checkpoint was
hard-linked: free, but the server's weights changed with the file. Each build runs in a fresh process (no
hash cache). Registering the model dir is not repeated here: the copy holds the same bytes as the link did
and the worker memory-maps it the same way, so its register time is benchmark 3's no-archive register. The
large-checkpoint goal (>= 8x faster than the default ``.mar`` at 1 GiB, build + register) uses benchmark 3's
default ``.mar`` and no-archive register medians from the results file.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from bench import models
from bench.harness import Settings, interleave, run_child, summary, timed

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"private copy (now)": "copy", "hard link (before)": "link"}
COPY = next(iter(VARIANTS))
DEFAULT_MAR = "default .mar (torch-model-archiver CLI)"  # benchmark 3's rows, the goal's reference
NO_ARCHIVE = "msnb no-archive (register/redeploy)"


def run(settings: Settings) -> dict:
    work = settings.workdir / "file_copy"
    (work / "store").mkdir(parents=True, exist_ok=True)
    sizes = settings.size([(100, 2), (1024, 2)], [(16, 2)], [(1, 1)])  # (MiB, repetitions)
    out, load = {}, [os.getloadavg()[0]]
    try:
        for mib, reps in sizes:
            checkpoint = models.save_random_blob(mib, work / f"blob{mib}.pt")
            runs = interleave({label: _variant(kind, mib, checkpoint, work) for label, kind in VARIANTS.items()}, reps)
            out[f"{mib} MiB"] = {label: {k: summary([r[k] for r in rs]) for k in rs[0]} for label, rs in runs.items()}
            checkpoint.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load.append(os.getloadavg()[0])
    return report(out, settings, load)


def _variant(kind: str, mib: int, checkpoint: Path, work: Path):
    name, store = f"blob_{kind}", work / "store"

    def measure() -> dict[str, float]:
        log = work / f"{name}.log"
        log.unlink(missing_ok=True)
        run_child(
            [sys.executable, "-m", "bench.file_copy", kind, name, str(mib), str(checkpoint), str(store)], log, cwd=ROOT
        )
        shutil.rmtree(store / name)
        return json.loads(log.read_text().splitlines()[-1])

    return measure


def _build_child(kind: str, name: str, mib: str, checkpoint: str, store: str) -> None:
    """In a fresh process: hash and copy (or link) the checkpoint alone, then build the no-archive model dir."""
    import msnb.spec
    from msnb import files
    from msnb.files import clone_file, link_or_copy
    from msnb.package import archive, build_inputs, formats

    scratch = Path(store).parent / f".{name}.part"
    start = time.perf_counter()
    if kind == "copy":
        build_inputs.fingerprint(checkpoint)
    hashed = time.perf_counter()
    (clone_file if kind == "copy" else link_or_copy)(checkpoint, scratch)
    copied = time.perf_counter()
    os.unlink(scratch)
    files._hash.cache_clear()  # the build below hashes again, as a fresh kernel's first build does
    if kind == "link":  # the build as it was: the checkpoint hard-linked, the digest from its stat
        archive.clone_file = link_or_copy
        msnb.spec.fingerprint = lambda path: str(os.stat(path).st_mtime_ns)
    spec = models.blob_spec(name, int(mib), Path(checkpoint))
    build = timed(lambda: archive.build(spec, Path(store), fmt=formats.SERVE_FORMAT, archive_name=name))
    print(json.dumps({"hash s": hashed - start, "copy s": copied - hashed, "build s": build}))


def report(out: dict, settings: Settings, load: list[float]) -> dict:
    targets, ratios = [], {}
    default, register = _reference(DEFAULT_MAR, "total s"), _reference(NO_ARCHIVE, "register s")
    for size, rows in out.items():
        copy, link = (rows[label]["build s"]["median"] for label in VARIANTS)
        ratios[f"{size}: what the copy adds to a build (copy - link), s"] = copy - link
        if size in default and size in register:
            speed = default[size] / (copy + register[size])
            ratios[f"{size}: default .mar / private copy (build + register)"] = speed
            targets.append(
                {
                    "target": f"{size}: private copy >= 8x faster than default .mar",
                    "value": f"{speed:.1f}x",
                    "met": speed >= 8,
                }
            )
    return {
        "title": "Private checkpoint copies: what the copy adds to a no-archive build, vs the former hard link",
        "unit": "s",
        "rows": out,
        "ratios": ratios,
        "targets": targets,
        "notes": f"{'quick mode (small checkpoint); ' if settings.quick else ''}build = archive.build(no-archive) in "
        "a fresh process (hash + copy + render); 'hash s' and 'copy s' time the two steps alone (the link row "
        "links instead and takes the digest from the stat, as before). Build + register = this build's median + "
        "benchmark 3's no-archive register median; the default .mar reference is benchmark 3's build + register "
        f"of the same random checkpoint ({', '.join(f'{k}: {v:.1f} s' for k, v in default.items()) or 'none'}). "
        f"1-minute load average {load[0]:.1f} at the start, {load[-1]:.1f} at the end (2 cores; benchmark 3's "
        "figures were taken on an idle machine).",
    }


def _reference(row: str, metric: str) -> dict[str, float]:
    """Benchmark 3's median ``metric`` of ``row`` per checkpoint size, from the results file ({} if absent)."""
    try:
        rows = json.loads((Path(__file__).parent / "results.json").read_text())["results"]["checkpoint"]["rows"]
        return {size: r[row][metric]["median"] for size, r in rows.items() if row in r}
    except (OSError, KeyError, ValueError):
        return {}


if __name__ == "__main__":
    _build_child(*sys.argv[1:])
