"""The benchmark harness still runs: `python -m bench --smoke` writes a result per benchmark (no timings asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BENCH_GROUP, RAY_GROUP

from bench.__main__ import BENCHMARKS, RAY_BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
# Every benchmark `python -m bench` runs must write its result. Two runs of them, each as `python -m bench --only
# NAMES` runs them (one process, one after the other, in BENCHMARKS' order): those that start a Ray run in the Ray
# tier's group, never beside another Ray; the others run on the other worker meanwhile, in a group of their own.
WITH_RAY = [name for name in BENCHMARKS if name in RAY_BENCHMARKS]
WITHOUT_RAY = [name for name in BENCHMARKS if name not in RAY_BENCHMARKS]
pytestmark = pytest.mark.server


def smoke(out: Path, names: list[str]) -> tuple[Path, subprocess.CompletedProcess]:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out), "--only", *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    return out, run


@pytest.fixture(scope="module")
def ray_smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    return smoke(tmp_path_factory.mktemp("bench-smoke-ray"), WITH_RAY)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    return smoke(tmp_path_factory.mktemp("bench-smoke"), WITHOUT_RAY)


def test_the_two_runs_are_every_benchmark_once():
    assert sorted(WITH_RAY + WITHOUT_RAY) == sorted(BENCHMARKS) and len(set(BENCHMARKS)) == len(BENCHMARKS)
    assert RAY_BENCHMARKS <= set(BENCHMARKS), RAY_BENCHMARKS - set(BENCHMARKS)
    assert WITH_RAY[-1] == "ray_cluster_start"  # its two-node cluster changes the process's Ray token: last


def written(name: str, run: tuple[Path, subprocess.CompletedProcess], names: list[str]) -> dict:
    """``name``'s result in a run of ``names``, after checking that the run wrote its report, figure and sections."""
    out, done = run
    assert (out / "RESULTS.md").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "results.png").is_file()
    results = json.loads((out / "results.json").read_text())["results"]
    assert set(results) == set(names)
    assert "error" not in results[name], f"{results[name].get('error')}\n{done.stderr[-3000:]}"
    assert "skipped" in results[name] or results[name]["rows"]  # an optional anchor (LitServe) may be absent
    assert results[name]["title"] in (out / "RESULTS.md").read_text()  # its section of the report
    return results[name]


@pytest.mark.timeout(1200)  # the first test waits for the whole run (about 2 min on 2 idle cores)
@pytest.mark.xdist_group(RAY_GROUP)
@pytest.mark.parametrize("name", WITH_RAY)
def test_smoke_benchmark_run_with_a_ray_writes_its_result(name, ray_smoke_run):
    written(name, ray_smoke_run, WITH_RAY)


@pytest.mark.timeout(1200)
@pytest.mark.xdist_group(BENCH_GROUP)
@pytest.mark.parametrize("name", WITHOUT_RAY)
def test_smoke_benchmark_run_writes_its_result(name, smoke_run):
    result = written(name, smoke_run, WITHOUT_RAY)
    rays = [row for row in result.get("rows", {}) if "ray" in row.lower()]
    assert not rays, f"{name} reports Ray rows {rays}: name it in bench/__main__.py RAY_BENCHMARKS"
