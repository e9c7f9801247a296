"""Each run size picks its own value: --smoke shrinks further and leaves the full and quick runs' sizes as they were."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import bench
from bench.__main__ import parse
from bench.harness import Settings


def test_each_run_size_reads_its_own_value_and_smoke_falls_back_to_quick(tmp_path: Path):
    full, quick = Settings(quick=False, workdir=tmp_path), Settings(quick=True, workdir=tmp_path)
    smoke = Settings(quick=True, workdir=tmp_path, smoke=True)
    assert [s.size(1500, 300, 16) for s in (full, quick, smoke)] == [1500, 300, 16]
    assert [s.size(10, 3) for s in (full, quick, smoke)] == [10, 3, 3]  # no smoke value: the quick run's
    assert [s.reps for s in (full, quick, smoke)] == [5, 2, 1]
    assert [s.mode for s in (full, quick, smoke)] == ["", "quick mode: ", "smoke mode: "]


def test_smoke_and_quick_are_one_choice():
    assert parse(["--smoke"]).smoke and not parse(["--smoke"]).quick
    with pytest.raises(SystemExit) as exit_:
        parse(["--quick", "--smoke"])
    assert exit_.value.code == 2  # argparse's usage error


def test_benchmarks_named_alone_run_as_with_only_and_an_unknown_name_is_refused(capsys):
    assert parse(["ray_archives", "--quick"]).only == ["ray_archives"]
    assert parse(["--only", "streaming", "ray_archives"]).only == ["streaming", "ray_archives"]
    assert parse([]).only is None  # every benchmark
    with pytest.raises(SystemExit) as exit_:
        parse(["ray_archive"])
    assert exit_.value.code == 2 and "no benchmark named ray_archive" in capsys.readouterr().err


# LitServe's apps are run by the benchmarks beside it, from the [bench] extra (the test environment has no LitServe).
NEEDS_LITSERVE = "litserve_"


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in Path(bench.__file__).parent.glob("*.py") if not p.stem.startswith("_"))
)
def test_every_benchmark_module_imports(name: str):
    """A renamed name in msnb (a constant, an engine's attribute) fails here, not first in a measured run."""
    if name.startswith(NEEDS_LITSERVE):
        pytest.importorskip("litserve")
    importlib.import_module(f"bench.{name}")
