"""Serve time and model-folder size of a handler importing captum (which requires torch), before and after
requirements add only what is missing (`python -m bench.second_torch [--skip-before]` writes bench/SECOND_TORCH.md)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import report as rep
from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.engines.torchserve import LocalServer
from msnb.package import archive
from msnb.session.deployment import deploy
from msnb.spec import USE_VENV
from msnb.templates.msnb_runtime.handler.names import CONFIG

CELL = """
import captum
import torch

def handle(data, context):
    if data is None:
        return None
    return [{"torch": torch.__version__, "file": torch.__file__, "model_dir": context.system_properties["model_dir"]}
            for _ in data]
"""
REPS = 3
BEFORE = "before: %ms_serve (pip install -t)"
AFTER_SERVE = "after: %ms_serve"
AFTER_EXPORT = "after: exported .mar on a server (useVenv)"
OUT = Path(__file__).parent / "SECOND_TORCH.md"


def folder_size(folder: str) -> int:
    """Bytes under ``folder`` (links not followed: the server's own packages seen through the venv do not count)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        total += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    return total


def measure(server: LocalServer, serve) -> dict:
    """One serve: seconds until a worker answers, what torch it runs, how big its model folder is (the folder the
    handler sees plus what TorchServe made for it under its own models folder: where pip installs)."""
    made = server.workdir / "tmp" / "models"
    old = set(made.iterdir()) if made.is_dir() else set()
    start = time.perf_counter()
    name = serve()
    answer = server.predict(name, {"x": 1})
    seconds = time.perf_counter() - start
    folders = {Path(answer["model_dir"]).resolve(), *(p.resolve() for p in set(made.iterdir()) - old)}
    return {
        "seconds": seconds,
        "torch": answer["torch"],
        "torch_file": answer["file"],
        "folder_bytes": sum(folder_size(str(f)) for f in folders),
    }


def before(server: LocalServer, spec) -> str:
    """%ms_serve as it was: every pin in requirements.txt and no useVenv, so TorchServe runs pip install -t."""
    path = archive.build(spec, server.store.root, fmt=archive.SERVE_FORMAT, archive_name="before")
    config = path / CONFIG
    config.write_text(yaml.safe_dump({k: v for k, v in yaml.safe_load(config.read_text()).items() if k != USE_VENV}))
    return server.redeploy(path, workers=1).name


def run(work: Path, skip_before: bool) -> dict:
    spec = capture("ct", CELL, [], search_path=search_path(work))
    # PIP_NO_CACHE_DIR: every install downloads, as a first serve on a machine does (no warm wheel cache).
    with LocalServer(work / "server", env={"PIP_NO_CACHE_DIR": "1"}) as server:
        rows: dict[str, list] = {BEFORE: [], AFTER_SERVE: [], AFTER_EXPORT: []}
        if not skip_before:  # 5.5 GiB each: once
            rows[BEFORE].append(measure(server, lambda: before(server, spec)))
        for i in range(REPS):
            named = spec.replace(name=f"s{i}")
            rows[AFTER_SERVE].append(measure(server, lambda s=named: deploy(server, s).name))
            mar = archive.build(spec.replace(name=f"e{i}"), work / "store", fmt=archive.EXPORT_FORMAT)
            rows[AFTER_EXPORT].append(measure(server, lambda m=mar: server.register(m).name))
    return {k: v for k, v in rows.items() if v}


def markdown(rows: dict, meta: dict) -> str:
    lines = [
        "# A handler importing captum: serve time and model folder, before and after",
        "",
        f"`python -m bench.second_torch` on {meta['machine']['date']}, {meta['machine']['cpus']} CPUs, "
        f"load average {meta['load_start']} -> {meta['load_end']}; torch {meta['torch']} in the server's environment.",
        "A serve is timed from the build to the first answer; the folder is the model folder as TorchServe holds it.",
        "Every pip install downloads (PIP_NO_CACHE_DIR=1), as a first serve on a machine does.",
        "",
        "| variant | runs | serve, s (median, min-max) | model folder | torch the worker imported |",
        "|---|---|---|---|---|",
    ]
    for name, runs in rows.items():
        secs = [r["seconds"] for r in runs]
        size = statistics.median(r["folder_bytes"] for r in runs) / 2**20
        torch_ = "; ".join(sorted({f"{r['torch']} ({_where(r['torch_file'])})" for r in runs}))
        lines.append(
            f"| {name} | {len(runs)} | {statistics.median(secs):.1f} ({min(secs):.1f}-{max(secs):.1f}) | "
            f"{size:,.1f} MiB | {torch_} |"
        )
    return "\n".join(lines) + "\n"


def _where(path: str) -> str:
    return "inside the model folder" if "/models/" in path else "the server's own"


def main() -> int:
    import torch

    work = Path(tempfile.mkdtemp(prefix="msnb-bench-second-torch-"))
    meta = {"machine": rep.machine(), "load_start": [round(x, 1) for x in os.getloadavg()], "torch": torch.__version__}
    try:
        rows = run(work, "--skip-before" in sys.argv)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_end"] = [round(x, 1) for x in os.getloadavg()]
    OUT.write_text(markdown(rows, meta))
    OUT.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
