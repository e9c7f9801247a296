"""The benchmark harness still runs: `python -m bench --smoke` writes a result per benchmark (no timings asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import RAY_GROUP

from bench.__main__ import BENCHMARKS as ALL_BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = set(ALL_BENCHMARKS)  # every benchmark `python -m bench` runs must write its result

# One run of all of them, as `python -m bench` runs them (one process, one after the other); each test reads its part.
# It starts a Ray and a two-node cluster: it runs in the Ray tier's group, never beside another Ray.
pytestmark = [pytest.mark.server, pytest.mark.xdist_group(RAY_GROUP)]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("bench-smoke")
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    return out, run


@pytest.mark.timeout(1200)  # the first test waits for the whole run (about 3 min on 2 idle cores)
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_smoke_benchmark_run_writes_its_result(name, smoke_run):
    out, run = smoke_run
    assert (out / "RESULTS.md").is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    assert (out / "results.png").is_file()
    results = json.loads((out / "results.json").read_text())["results"]
    assert set(results) == BENCHMARKS
    assert "error" not in results[name], f"{results[name].get('error')}\n{run.stderr[-3000:]}"
    assert "skipped" in results[name] or results[name]["rows"]  # an optional anchor (LitServe) may be absent
    assert results[name]["title"] in (out / "RESULTS.md").read_text()  # its section of the report
