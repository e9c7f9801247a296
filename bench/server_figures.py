"""Measure LocalServer's user-facing latencies (median of N): cold start, warm redeploy, stop.

Run: .venv/bin/python bench/server_figures.py [--runs 5]
Each run: start a fresh server -> register a small spec -> first prediction (cold), then redeploy a
changed handler -> first prediction of the new version (warm), then stop -> no process left.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from msnb.server import LocalServer
from msnb.spec import spec_from_source

SOURCE = '''
import torch

VERSION = {version}

def init_function():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

def preprocess(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)

def postprocess(output):
    return {{"version": VERSION, "label": int(output.argmax())}}
'''
SAMPLE = {"x": [1.0, 2.0, 3.0, 4.0]}


def leftovers(workdir: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(str(workdir) in p for p in proc.info["cmdline"] or ()):
            out.append(proc)
    return out


def one_run(root: Path, run: int) -> dict[str, float]:
    times: dict[str, float] = {}
    server = LocalServer(root / f"run{run}")
    t0 = time.perf_counter()
    server.start()
    times["start -> healthy"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    server.register(spec_from_source("bench", SOURCE.format(version=1)))
    times["register (spec, no-archive)"] = time.perf_counter() - t1
    assert server.predict("bench", SAMPLE)["version"] == 1
    times["cold start -> first prediction"] = time.perf_counter() - t0
    t2 = time.perf_counter()
    server.redeploy(spec_from_source("bench", SOURCE.format(version=2)))
    assert server.predict("bench", SAMPLE)["version"] == 2
    times["warm redeploy -> first prediction"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    server.stop()
    while leftovers(server.workdir):
        time.sleep(0.05)
    times["stop -> all processes gone"] = time.perf_counter() - t3
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    import msnb.archive  # noqa: F401  (torch import: a one-time cost of the process, not of a server)

    with tempfile.TemporaryDirectory(prefix="msnb-bench-") as tmp:
        runs = [one_run(Path(tmp), i) for i in range(args.runs)]
    print(f"{'step':36} {'median s':>9} {'min s':>7} {'max s':>7}   (n={args.runs})")
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"{key:36} {statistics.median(values):9.2f} {min(values):7.2f} {max(values):7.2f}")


if __name__ == "__main__":
    main()
