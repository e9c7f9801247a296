"""Benchmark 6, hermetic archives: what bundling a 20-module local package and pinning requirements add to a
capture and to a build (`python -m bench.hermetic` writes bench/HERMETIC.md on its own)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import Settings, interleave, summary
from msnb.capture import local_code, requirements
from msnb.capture.cells import capture
from msnb.package import archive, formats

MODULES = 20
GOAL_S = 0.2
CELL = """
import numpy
import torch
import mypkg.m0

def init_function(hidden=8):
    return torch.nn.Linear(4, hidden)

def postprocess(output):
    return {"v": float(numpy.asarray(output).sum()) * mypkg.m0.SCALE}
"""


def make_package(root: Path) -> Path:
    """mypkg/ with MODULES modules, each importing the next (and torch), as a real model package would."""
    pkg = root / "mypkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for i in range(MODULES):
        nxt = f"from . import m{i + 1}\n" if i + 1 < MODULES else ""
        (pkg / f"m{i}.py").write_text(f"import torch\n{nxt}SCALE = 1.0\n\ndef f{i}(x):\n    return torch.relu(x)\n")
    return root


def run(settings: Settings) -> dict:
    root = make_package(settings.workdir / "hermetic")
    path = local_code.search_path(root)
    plain = capture("h", CELL, [])
    hermetic = capture("h", CELL, [], search_path=path)
    assert len(hermetic.bundle) == MODULES + 1, hermetic.bundle

    def cold() -> None:  # a kernel's first capture: no cached lookups
        local_code.classify.cache_clear()
        requirements._index.cache_clear()
        requirements._named_for.cache_clear()
        requirements.serving_distributions.cache_clear()
        capture("h", CELL, [], search_path=path)

    variants = {
        "capture / plain (no bundling)": lambda: capture("h", CELL, []),
        "capture / hermetic, warm": lambda: capture("h", CELL, [], search_path=path),
        "capture / hermetic, first in a kernel": cold,
        "build zip-store / plain": lambda: _build(plain, settings.workdir / "out-plain"),
        "build zip-store / hermetic (21 files + requirements.txt)": lambda: _build(
            hermetic, settings.workdir / "out-h"
        ),
    }
    reps = settings.size(15, 5, 1)
    results = interleave({name: _timed(fn) for name, fn in variants.items()}, reps)
    return report({name: summary(values) for name, values in results.items()})


def _build(spec, out: Path) -> None:
    archive.build(spec, out, fmt=formats.DEV_FORMAT)


def _timed(fn):
    def measure() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return measure


def report(stats: dict) -> dict:
    med = {k: v["median"] for k, v in stats.items()}
    capture_added = med["capture / hermetic, warm"] - med["capture / plain (no bundling)"]
    cold_added = med["capture / hermetic, first in a kernel"] - med["capture / plain (no bundling)"]
    build_added = med["build zip-store / hermetic (21 files + requirements.txt)"] - med["build zip-store / plain"]
    rows = {k: stats[k] for k in stats}
    return {
        "title": f"6. Hermetic archives: bundling a {MODULES}-module local package + pinning requirements",
        "unit": "s",
        "rows": rows,
        "ratios": {
            "added to a capture (warm), s": capture_added,
            "added to the first capture in a kernel, s": cold_added,
            "added to a build, s": build_added,
        },
        "targets": [
            {
                "target": f"bundling + requirement inference add <= {GOAL_S} s to a capture ({MODULES}-module package)",
                "value": f"{capture_added:.3f} s warm, {cold_added:.3f} s first",
                "met": max(capture_added, cold_added) <= GOAL_S,
            },
            {
                "target": f"bundling adds <= {GOAL_S} s to a build",
                "value": f"{build_added:.3f} s",
                "met": build_added <= GOAL_S,
            },
        ],
        "notes": "The import graph is read with ast and Python's file finder (nothing imported); installed distributions "
        "are read with importlib.metadata (an import name's own distribution first, the full index only when that "
        "misses), cached per change of site-packages, which is what the first capture in a kernel pays.",
    }


def main() -> int:
    from bench import report as rep

    work = Path(tempfile.mkdtemp(prefix="msnb-bench-hermetic-"))
    try:
        start = time.perf_counter()
        result = run(Settings(quick="--quick" in sys.argv, workdir=work))
        meta = {"quick": "--quick" in sys.argv, "machine": rep.machine(), "seconds": time.perf_counter() - start}
        meta["load_end"] = rep.machine()["load_average_at_start"]
        text = rep.markdown({"hermetic": result}, meta).replace("python -m bench", "python -m bench.hermetic", 1)
        (Path(__file__).parent / "HERMETIC.md").write_text(text)
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
