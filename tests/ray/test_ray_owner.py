"""Nothing is left when the process that owns a Ray ends: killed (started without pipes, as from a terminal; a killed
Jupyter kernel, whose output is piped, is tests/ray/test_ray_notebook.py's) or exiting normally, its Ray processes
(the agents included) and its temp dir are gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import poll

GONE_WITHIN_S = 10  # the promise: every process of the session and its temp dir gone 10 s after the owner
OWNER = textwrap.dedent(
    """
    import sys
    from msnb.engines.ray.engine import LocalRay

    server = LocalRay().start()
    print("root:", server.root, flush=True)
    sys.stdin.readline()  # the test closes our stdin to end us normally
    """
)


def start_owner(tmp_path: Path) -> tuple[subprocess.Popen, Path, list[psutil.Process]]:
    """The owner, its Ray up; returns it, the Ray temp root and every process it started (agents included)."""
    script, log = tmp_path / "owner.py", tmp_path / "owner.log"
    script.write_text(OWNER)
    owner = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True
    )

    def root_line() -> str:
        """The owner's "root:" line; an owner that ended first fails the test at once, with its output."""
        found = next((x for x in log.read_text().splitlines() if _root_line(x)), "")
        if not found and owner.poll() is not None:
            pytest.fail(f"the owner ended ({owner.returncode}) before its Ray started:\n{log.read_text()[-3000:]}")
        return found

    line = poll(root_line, 300, "the owner's Ray to start", interval=0.5, log=lambda: log.read_text()[-3000:])
    root = Path(line.split(":", 1)[1].strip())
    started = psutil.Process(owner.pid).children(recursive=True)
    commands = [" ".join(p.cmdline()) for p in started]
    for agent in ("ray::DashboardAgent", "ray::RuntimeEnvAgent"):  # what outlived a killed owner before
        assert any(c.startswith(agent) for c in commands), commands
    return owner, root, started


def _root_line(line: str) -> str:
    return line if line.startswith("root:") else ""


def left(procs: list[psutil.Process], root: Path) -> list[str]:
    running = [" ".join(p.cmdline())[:60] for p in procs if _alive(p)]
    return running + ([str(root)] if root.exists() else [])


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(started: list[psutil.Process], root: Path) -> None:
    """Poll until none of the session's Ray processes and none of its temp dir are left (failing with what is)."""
    poll(
        lambda: not left(started, root),
        GONE_WITHIN_S,
        "the session's Ray processes and temp dir to go",
        interval=0.2,
        log=lambda: "\n".join(left(started, root)),
    )


# Killed with piped output, as Jupyter starts a kernel: tests/ray/test_ray_notebook.py kills a real kernel.
def test_a_killed_owner_leaves_no_ray_process_and_no_temp_dir(tmp_path):
    owner, root, started = start_owner(tmp_path)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(30)
    wait_gone(started, root)


def test_an_owner_that_exits_normally_leaves_nothing(tmp_path):
    owner, root, started = start_owner(tmp_path)
    owner.stdin.close()
    owner.wait(120)
    wait_gone(started, root)
