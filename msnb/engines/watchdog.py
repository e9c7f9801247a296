"""Stop an engine's process tree (a TorchServe, a Ray node); run as `python -m msnb.engines.watchdog PID [MODEL_STORE [KEY=VALUE]]` to stop
it when the owner dies (KEY=VALUE: also every Ray process whose environment holds it, see ``marked``).

The owner keeps the write end of the watchdog's stdin. Whatever way the owner ends (stop(),
normal exit, SIGKILL of a Jupyter kernel), the pipe closes, the watchdog reads EOF, stops
the Java process and its workers, and deletes MODEL_STORE (a temporary workdir's registered
archives and checkpoint copies) when given. ``sweep_stale`` removes what an owner left behind when
even the watchdog could not run (the machine rebooted, the watchdog was killed too).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

TEMP_PREFIX = "msnb-server-"  # a LocalServer's temporary workdir: tempfile.mkdtemp(prefix=TEMP_PREFIX)
OWNER_FILE = "msnb-owner.json"
TERM_GRACE_S = 8.0  # the longest a TorchServe gets after SIGTERM to close its ports (it takes well under 1 s)
STOP_POLL_S = 0.02
MARKED_GRACE_S = 2.0  # Ray's processes left by a dead owner: SIGTERM, then SIGKILL (all gone within 10 s)
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
    """SIGTERM the process; once it has closed its listening sockets (TorchServe's first step on SIGTERM: nothing new
    can arrive) or exited, or after ``grace_s``, SIGKILL it, then kill whatever of its tree is left.

    TorchServe's own shutdown then spends ~4 s in Netty's quiet periods and in stopping its workers one by one:
    work that this kill does at once (msnb keeps no shutdown snapshot)."""
    procs = process_tree(pid)
    if not procs:
        return
    _signal(procs[:1], "terminate")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _listening(procs[0]):
        time.sleep(STOP_POLL_S)
    _signal(procs, "kill")  # Java and its workers (a SIGKILLed Java would leave them behind)
    wait_gone(procs, timeout=5.0)


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited; returns those still running after ``timeout``. An exited process whose
    parent has not reaped it yet counts as gone: TorchServe's Java is a daemon whose parent is PID 1, and some
    containers' PID 1 reaps only every second or two (``psutil.wait_procs`` waits for that)."""
    deadline = time.monotonic() + timeout
    running = list(procs)
    while running:
        running = [proc for proc in running if alive(proc)]
        if not running or time.monotonic() >= deadline:
            break
        time.sleep(STOP_POLL_S)
    return running


def _listening(proc: psutil.Process) -> bool:
    """Whether the process still runs and listens on a TCP port."""
    try:
        return any(c.status == psutil.CONN_LISTEN for c in proc.net_connections(kind="tcp"))
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # cannot look (another user's process): give it the whole grace period
        return proc.is_running()


def _signal(procs: list[psutil.Process], how: str) -> None:
    for proc in procs:
        try:
            getattr(proc, how)()
        except psutil.NoSuchProcess:
            pass


def marked(key: str, value: str) -> list[psutil.Process]:
    """Every live Ray process (a ``ray::`` actor or agent, a raylet, a GCS, a Ray Python script) that belongs to the
    node started with ``key=value`` (``RAY_TMPDIR=ROOT``): its environment holds it, or (agents rewrite their
    environment with their title) it has a file open under ``value``, or it descends from such a process. Never
    this process nor its parent (the owner, on ``stop()``)."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        command = " ".join(proc.info["cmdline"] or ())
        if proc.pid in (os.getpid(), os.getppid()) or not (command.startswith("ray::") or "/ray/" in command):
            continue
        try:
            if _belongs(proc, key, value):
                found |= {p.pid: p for p in process_tree(proc)}
        except psutil.Error:
            pass
    return list(found.values())


def _belongs(proc: psutil.Process, key: str, value: str) -> bool:
    if proc.environ().get(key) == value:
        return True
    return any(f.path.startswith(value.rstrip("/") + "/") for f in proc.open_files())


def stop_all(procs: list[psutil.Process], grace_s: float = MARKED_GRACE_S) -> None:
    """SIGTERM every process at once, SIGKILL those still running after ``grace_s``."""
    _signal(procs, "terminate")
    survivors = wait_gone(procs, timeout=grace_s)
    _signal(survivors, "kill")
    wait_gone(survivors, timeout=5.0)


def spawn(
    pid: int, model_store: Path | Sequence[Path] | None = None, marker: tuple[str, str] | None = None
) -> subprocess.Popen:
    """Start a watchdog for ``pid``; keep the returned Popen (its stdin) alive as long as the server.

    ``model_store`` (a temporary workdir's own; or several folders: the models' variables too) is deleted once the
    owner is gone; ``marker`` (KEY, VALUE): every Ray process whose environment holds it is stopped first (see
    ``marked``).
    """
    folders = [model_store] if isinstance(model_store, (str, Path)) else list(model_store or ())
    extra = [os.pathsep.join(map(str, folders))] if folders else []
    extra += ["=".join(marker)] if marker and folders else []
    return subprocess.Popen(
        [sys.executable, "-m", "msnb.engines.watchdog", str(pid), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # survives a signal sent to the owner's process group
    )


def watch(
    pid: int, owner_fd: int = 0, model_store: Path | Sequence[Path] | None = None, marker: tuple[str, str] | None = None
) -> None:
    """Block until the owner's pipe closes, then stop ``pid``'s tree (if it still runs) and the processes ``marker``
    names, and delete ``model_store`` (one folder or several)."""
    try:
        java: psutil.Process | None = psutil.Process(pid)
    except psutil.NoSuchProcess:
        java = None
    while True:
        ready, _, _ = select.select([owner_fd], [], [], POLL_S if java is not None else None)
        if ready and not os.read(owner_fd, 4096):
            break
        if java is not None and not alive(java):
            java = None  # died by itself: the owner restarts or stops it; keep watching the owner
    if marker is not None:  # a Ray node: all its processes at once, found before any goes (agents lose their parent)
        procs = [*(process_tree(java) if java is not None else []), *marked(*marker)]
        stop_all(list({p.pid: p for p in procs}.values()))
    elif java is not None:
        stop_tree(java)
    for folder in [model_store] if isinstance(model_store, (str, Path)) else model_store or ():
        shutil.rmtree(folder, ignore_errors=True)


def mark_owner(workdir: Path) -> None:
    """Record this process as the owner of a temporary workdir (``sweep_stale`` reads it)."""
    from msnb.files import write_atomic  # here, not at the top: the watchdog process imports only psutil

    me = psutil.Process()
    # Atomic: another process's sweep_stale must never read a half-written file as "owner gone".
    write_atomic(workdir / OWNER_FILE, json.dumps({"pid": me.pid, "started": me.create_time()}))


def sweep_stale(root: Path, prefix: str = TEMP_PREFIX) -> list[Path]:
    """Delete the model store of every temporary workdir in ``root`` whose owner process is gone; logs stay."""
    from msnb.engines.env_vars import ENV_DIR
    from msnb.engines.store import STORE_DIR  # here: the watchdog process imports only psutil

    swept = []
    for owner_file in Path(root).glob(f"{prefix}*/{OWNER_FILE}"):
        workdir = owner_file.parent
        if _owner_alive(owner_file) or not any((workdir / d).exists() for d in (STORE_DIR, ENV_DIR)):
            continue
        for folder in (STORE_DIR, ENV_DIR):  # the models' variables (--env) go with the store
            shutil.rmtree(workdir / folder, ignore_errors=True)
        swept.append(workdir)
    return swept


def _owner_alive(owner_file: Path) -> bool:
    try:
        owner = json.loads(owner_file.read_text())
        return abs(psutil.Process(owner["pid"]).create_time() - owner["started"]) < 1.0
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return False


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (is_running also notices a reused pid)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":
    mark = tuple(sys.argv[3].split("=", 1)) if len(sys.argv) > 3 else None
    folders = [Path(p) for p in sys.argv[2].split(os.pathsep) if p] if len(sys.argv) > 2 else []
    watch(int(sys.argv[1]), model_store=folders, marker=mark)
