"""Stopping process trees: an exited process counts as gone before its parent reaps it (TorchServe's Java is a
daemon whose parent is PID 1, which may reap late), and a process that runs on is reported as a survivor."""

from __future__ import annotations

import subprocess
import sys

import psutil

from msnb.engines.watchdog import wait_gone


def test_an_exited_process_its_parent_has_not_reaped_is_gone_at_once():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = psutil.Process(child.pid)
    try:
        proc.kill()
        assert wait_gone([proc], timeout=10.0) == []
        assert proc.status() == psutil.STATUS_ZOMBIE  # still unreaped: psutil.wait_procs would wait for the reap
    finally:
        child.wait()


def test_a_process_that_runs_on_is_returned_after_the_timeout():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert [p.pid for p in wait_gone([psutil.Process(child.pid)], timeout=0.2)] == [child.pid]
    finally:
        child.kill()
        child.wait()
