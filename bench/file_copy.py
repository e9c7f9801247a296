"""Benchmark: private checkpoint copies, what the served model dir's own copy of the checkpoint costs.

A served model dir holds a private copy of the checkpoint (a copy-on-write clone on btrfs/xfs, an in-kernel
``copy_file_range`` copy on ext4) and the build hashes it once (sha256, what a stale check compares), so a
later ``torch.save`` to the notebook's path changes nothing that is served. Before, the checkpoint was
hard-linked: free, but the server's weights changed with the file. Each build runs in a fresh process (no
hash cache), then the model dir is registered on a real TorchServe; the large-checkpoint goal (>= 8x faster
than the default ``.mar`` at 1 GiB, build + register) is checked against benchmark 3's default ``.mar`` row.
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
from msnb.torchserve import LocalServer

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"private copy (now)": "copy", "hard link (before)": "link"}
COPY = next(iter(VARIANTS))
DEFAULT_MAR = "default .mar (torch-model-archiver CLI)"  # benchmark 3's row, the goal's reference


def run(settings: Settings) -> dict:
    work = settings.workdir / "file_copy"
    work.mkdir(parents=True, exist_ok=True)
    sizes = [(16, 2)] if settings.quick else [(100, 3), (1024, 3)]  # (MiB, repetitions)
    server, out = LocalServer(work / "msnb"), {}
    try:
        server.start()
        for mib, reps in sizes:
            checkpoint = models.save_random_blob(mib, work / f"blob{mib}.pt")
            runs = interleave(
                {label: _variant(server, kind, mib, checkpoint, work) for label, kind in VARIANTS.items()}, reps
            )
            out[f"{mib} MiB"] = {label: {k: summary([r[k] for r in rs]) for k in rs[0]} for label, rs in runs.items()}
            checkpoint.unlink()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return report(out, settings)


def _variant(server: LocalServer, kind: str, mib: int, checkpoint: Path, work: Path):
    name = f"blob_{kind}"

    def measure() -> dict[str, float]:
        log = work / f"{name}.log"
        log.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "bench.file_copy", kind, name, str(mib), str(checkpoint), str(server.model_store)]
        run_child(cmd, log, cwd=ROOT)
        parts = json.loads(log.read_text().splitlines()[-1])
        if kind == "copy":  # the linked dir holds the same files: its register is the same (not repeated)
            parts["register s"] = timed(lambda: server.register(server.model_store / name))
            server.unregister(name)  # also deletes it from the model store
        else:
            shutil.rmtree(server.model_store / name)
        return parts

    return measure


def _build_child(kind: str, name: str, mib: str, checkpoint: str, store: str) -> None:
    """In a fresh process: hash and copy (or link) the checkpoint alone, then build the no-archive model dir."""
    import msnb.spec
    from msnb import archive, taken
    from msnb.files import clone_file, link_or_copy

    scratch = Path(store).parent / f".{name}.part"
    start = time.perf_counter()
    if kind == "copy":
        taken.fingerprint(checkpoint)
    hashed = time.perf_counter()
    (clone_file if kind == "copy" else link_or_copy)(checkpoint, scratch)
    copied = time.perf_counter()
    os.unlink(scratch)
    taken._hash.cache_clear()  # the build below hashes again, as a fresh kernel's first build does
    if kind == "link":  # the build as it was: the checkpoint hard-linked, the digest from its stat
        archive.clone_file = link_or_copy
        msnb.spec.fingerprint = lambda path: str(os.stat(path).st_mtime_ns)
    spec = models.blob_spec(name, int(mib), Path(checkpoint))
    build = timed(lambda: archive.build(spec, Path(store), fmt=archive.SERVE_FORMAT, archive_name=name))
    print(json.dumps({"hash s": hashed - start, "copy s": copied - hashed, "build s": build}))


def report(out: dict, settings: Settings) -> dict:
    targets, ratios = [], {}
    reference = _default_mar()
    for size, rows in out.items():
        copy, link = (rows[label]["build s"]["median"] for label in VARIANTS)
        ratios[f"{size}: what the copy adds to a build (copy - link), s"] = copy - link
        total = copy + rows[COPY]["register s"]["median"]
        ratios[f"{size}: private copy, build + register, s"] = total
        default = reference.get(size)
        if default:
            speed = default / total
            ratios[f"{size}: default .mar / private copy (build + register)"] = speed
            targets.append(
                {
                    "target": f"{size}: private copy >= 8x faster than default .mar",
                    "value": f"{speed:.1f}x",
                    "met": speed >= 8,
                }
            )
    return {
        "title": "Private checkpoint copies: build + register, copy vs the former hard link",
        "unit": "s",
        "rows": out,
        "ratios": ratios,
        "targets": targets,
        "notes": f"{'quick mode (small checkpoint); ' if settings.quick else ''}build = archive.build(no-archive) in "
        "a fresh process (hash + copy + render), register = LocalServer.register of the copied model dir (the "
        "linked one holds the same files and is not registered again); 'hash s' and "
        "'copy s' time the two steps alone (the link row links instead and takes the digest from the stat, as "
        "before). The default .mar reference is benchmark 3's median build + register of the same random "
        f"checkpoint ({', '.join(f'{k}: {v:.1f} s' for k, v in reference.items()) or 'not measured'}).",
    }


def _default_mar() -> dict[str, float]:
    """Benchmark 3's default .mar build + register medians per size, from the results file ({} if absent)."""
    try:
        rows = json.loads((Path(__file__).parent / "results.json").read_text())["results"]["checkpoint"]["rows"]
        return {size: r[DEFAULT_MAR]["total s"]["median"] for size, r in rows.items() if DEFAULT_MAR in r}
    except (OSError, KeyError, ValueError):
        return {}


if __name__ == "__main__":
    _build_child(*sys.argv[1:])
