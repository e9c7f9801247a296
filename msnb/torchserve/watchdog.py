"""Stop a TorchServe process tree; run as `python -m msnb.torchserve.watchdog PID` to stop it when the owner dies.

The owner keeps the write end of the watchdog's stdin. Whatever way the owner ends (stop(),
normal exit, SIGKILL of a Jupyter kernel), the pipe closes, the watchdog reads EOF and stops
the Java process and its workers. It also exits on its own once Java is gone.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

import psutil

TERM_GRACE_S = 8.0  # Java exits ~4 s after SIGTERM (it stops its workers first)
POLL_S = 0.5


def process_tree(pid: int | psutil.Process) -> list[psutil.Process]:
    """The process and its descendants (empty when it is gone, or its pid now names another process)."""
    try:
        proc = pid if isinstance(pid, psutil.Process) else psutil.Process(pid)
        if not alive(proc):
            return []
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def stop_tree(pid: int | psutil.Process, grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM the process, SIGKILL it after ``grace_s``, then kill whatever of its tree is left."""
    procs = process_tree(pid)
    if not procs:
        return
    _signal(procs[:1], "terminate")
    _, survivors = psutil.wait_procs(procs[:1], timeout=grace_s)
    _signal(survivors, "kill")
    # Workers normally exit with Java; a SIGKILLed Java leaves them behind.
    _, leftovers = psutil.wait_procs(procs[1:], timeout=2.0)
    _signal(leftovers, "kill")
    psutil.wait_procs(procs, timeout=5.0)


def _signal(procs: list[psutil.Process], how: str) -> None:
    for proc in procs:
        try:
            getattr(proc, how)()
        except psutil.NoSuchProcess:
            pass


def spawn(pid: int) -> subprocess.Popen:
    """Start a watchdog for ``pid``; keep the returned Popen (its stdin) alive as long as the server."""
    return subprocess.Popen(
        [sys.executable, "-m", "msnb.torchserve.watchdog", str(pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # survives a signal sent to the owner's process group
    )


def watch(pid: int, owner_fd: int = 0) -> None:
    """Block until the owner's pipe closes (then stop ``pid``'s tree) or ``pid`` exits by itself."""
    try:
        java = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    while alive(java):
        ready, _, _ = select.select([owner_fd], [], [], POLL_S)
        if ready and not os.read(owner_fd, 4096):
            stop_tree(java)
            return


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (is_running also notices a reused pid)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":
    watch(int(sys.argv[1]))
