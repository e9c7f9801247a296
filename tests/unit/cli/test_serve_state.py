"""`msnb serve` keeps one state file per server; `msnb predict` picks the one it should ask."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from msnb.cli import serve_state
from msnb.cli.serve_state import ServerRecord
from msnb.errors import MsnbError, OptionError


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv(serve_state.STATE_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def record(pid: int, project: Path) -> ServerRecord:
    return ServerRecord(pid, str(project), f"http://127.0.0.1:{pid % 60000}", "http://m", "/k.json", ["mlp"])


def test_each_server_writes_its_own_file_and_a_dead_one_is_forgotten(state, tmp_path):
    mine = serve_state.write(record(os.getpid(), tmp_path / "a"))
    stale = serve_state.write(record(dead_pid(), tmp_path / "b"))
    assert mine == state / "servers" / f"{os.getpid()}.json" and mine != stale
    assert [r.pid for r in serve_state.running()] == [os.getpid()]
    assert not stale.exists(), "a dead server's file is removed when read"


def test_a_state_file_of_another_live_server_is_never_overwritten(state, tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = serve_state.write(record(other.pid, tmp_path / "b"), tmp_path / "shared.json")
        with pytest.raises(OptionError) as err:
            serve_state.write(record(os.getpid(), tmp_path / "a"), path)
        assert f"pid {other.pid}" in err.value.message and "leave out --state" in err.value.hint
    finally:
        other.kill()
        other.wait()


def test_predict_picks_the_server_of_the_folder_it_runs_in_or_asks(tmp_path):
    a, b = record(101, tmp_path / "a"), record(202, tmp_path / "b")
    nested = record(303, tmp_path / "a" / "sub")
    assert serve_state.choose([a], tmp_path / "elsewhere") == a
    assert serve_state.choose([a, b], tmp_path / "b" / "notebooks") == b
    assert serve_state.choose([a, b, nested], tmp_path / "a" / "sub" / "x") == nested
    with pytest.raises(OptionError) as err:
        serve_state.choose([a, b], tmp_path)
    assert "2 `msnb serve` are running" in err.value.message and "pid 101" in err.value.hint
    assert serve_state.choose([a, b], tmp_path, pick="202") == b
    (tmp_path / "a").mkdir()
    assert serve_state.choose([a, b], tmp_path, pick=str(tmp_path / "a")) == a
    with pytest.raises(OptionError, match="--server 999"):
        serve_state.choose([a, b], tmp_path, pick="999")
    with pytest.raises(MsnbError, match="No `msnb serve` is running"):
        serve_state.choose([], tmp_path)
