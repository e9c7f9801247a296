"""The benchmark harness still runs: `python -m bench --quick` writes a result per benchmark (no timings asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS as ALL_BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = set(ALL_BENCHMARKS)  # every benchmark `python -m bench` runs must write its result


@pytest.mark.server
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_quick_benchmark_run_writes_its_result(name, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", name, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert (tmp_path / "RESULTS.md").is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "results.png").is_file()
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert set(results) == {name}
    assert "error" not in results[name], f"{results[name].get('error')}\n{run.stderr[-3000:]}"
    assert "skipped" in results[name] or results[name]["rows"]  # an optional anchor (LitServe) may be absent
