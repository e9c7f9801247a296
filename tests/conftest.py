"""Fixtures shared by every tier (tiny handlers built from source, no model downloads), and the rule that a
test's folder is its tier: tests/kernel, tests/server, tests/browser, tests/install and tests/docs get that marker;
tests/unit and tests/spine may carry none of them (they start no kernel, server or browser)."""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import BENCH_GROUP, CLEAN_PYTHON_GROUP, MLP_SOURCE, RAY_GROUP

import msnb.session.core
from msnb.spec import spec_from_source

# A run started in the background by a shell without job control (`bash scripts/dev.sh test &`, nohup) begins with
# SIGINT ignored, and every process a test starts would inherit that: a `serve run`, `msnb serve` or kernel handed
# the Ctrl-C a test sends it would never see it. The run puts Python's own handler back (a handler, unlike an
# ignored signal, is reset to the default in a started process).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TIERS = ("kernel", "server", "browser", "install", "ray", "gpu", "docs")
MARKER_FREE = ("unit", "spine")


# The long xdist groups first (`--dist loadgroup --no-loadscope-reorder`: a worker is handed one group, or one ungrouped
# test, at a time, in the order of their first tests): every test that starts a Ray, the benchmark smoke run of the
# benchmarks with a Ray too, on one worker, one after another (helpers.RAY_GROUP); the kernel tier's clean venv and
# the smoke run of the benchmarks without a Ray on the other, then the single tests fill both workers, the unit
# tests last.
GROUP_ORDER = (RAY_GROUP, CLEAN_PYTHON_GROUP, BENCH_GROUP)


def _group_rank(item: pytest.Item) -> int:
    groups = [mark.args[0] for mark in item.iter_markers("xdist_group") if mark.args]
    return min((GROUP_ORDER.index(g) for g in groups if g in GROUP_ORDER), default=len(GROUP_ORDER))


@pytest.hookimpl(trylast=True)  # after tests/ray/conftest.py gave its tests their groups (and its own order)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_group_rank)  # stable: each group, and the singles, keep their order
    root = Path(__file__).parent
    for item in items:
        folder = Path(item.fspath).relative_to(root).parts[0]
        if folder in TIERS:
            item.add_marker(getattr(pytest.mark, folder))
        if folder in MARKER_FREE:
            tiers = [m.name for m in item.iter_markers() if m.name in TIERS]
            if tiers:
                raise pytest.UsageError(f"{item.nodeid} is marked {tiers} but lives in tests/{folder}: move it.")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On an xdist worker with ``--dist loadgroup``, an ``xdist_group`` test must carry its group in its node id (how
    xdist keeps a group on one worker): a pytest that ignores it splits the groups silently, so such a test fails."""
    if item.config.getoption("loadgroup", False) and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail(
            f"xdist_group is ignored: {item.nodeid} may run beside the rest of its group on another worker "
            "(pytest-xdist cannot mark this pytest's node ids). Hint: install the pytest that constraints.txt pins "
            "(bash scripts/dev.sh test sets it up).",
            pytrace=False,
        )


_TIER_SECONDS: dict[str, float] = defaultdict(float)
_WORKER_SECONDS: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's setup, call and teardown time, added to its tier (its folder under tests/) and to the xdist worker
    that ran it."""
    _TIER_SECONDS[report.nodeid.split("/")[1] if report.nodeid.startswith("tests/") else "other"] += report.duration
    _WORKER_SECONDS[getattr(report, "worker_id", None) or "main"] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """The time each tier took, summed over its tests (with -n 2, two run at once: the wall clock is about half), and
    each worker's sum (how evenly the groups were spread)."""
    if _TIER_SECONDS:
        terminalreporter.section("time per tier (summed test time)")
        for tier, seconds in sorted(_TIER_SECONDS.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{tier:>8}: {seconds:7.0f} s")
        for worker, seconds in sorted(_WORKER_SECONDS.items()):
            terminalreporter.write_line(f"{worker:>8}: {seconds:7.0f} s (summed on that worker)")


@pytest.fixture
def mlp_source() -> str:
    return MLP_SOURCE


@pytest.fixture
def mlp_spec():
    """A small classifier handler: {"x": [4 floats]} -> {"label", "scores"}."""
    return spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, example={"x": [1, 2, 3, 4]})


@pytest.fixture(scope="module")
def ip():
    """IPython's test shell (one per process) with `%load_ext msnb` done; a module may extend it with cells."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "msnb")
    return shell


@pytest.fixture
def session(monkeypatch):
    """A fresh msnb session for the test (specs, archives, server), stopped (its engine with it) afterwards."""
    fresh = msnb.session.core.Session()
    monkeypatch.setattr(msnb.session.core, "_default", fresh)
    yield fresh
    fresh.stop()
