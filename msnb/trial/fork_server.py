"""The warm side of test processes: a fork server that has imported torch and TorchServe once, and one spare
process forked from it, started in the background, waiting for the next handler generation to load."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHILD_MODULE = "msnb.trial.child"  # a test process runs its main(); the fork server imports it once (torch, ts)
PRELOAD = [CHILD_MODULE]
READY_ENV = "MSNB_FORKSERVER_READY"  # a file the fork server touches when its imports are done
LEFTOVERS_ENV = "MSNB_FORKSERVER_LEFTOVERS"  # the owner's pid and folders the fork server removes if it outlives it
DIR_PREFIX = "msnb-forkserver-"  # one folder per owner: the ready marker and every test process's files
READY_WAIT_S = 300.0  # how long a background refill waits for the fork server's imports
_LOCK = threading.Lock()
_MAIN_LOCK = threading.Lock()
_DIR_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"ready": None, "spare": None, "filling": False, "dir": None}


def warm_up() -> None:
    """Start the fork server (its imports run in its own process) and, in the background, a spare test process."""
    with _LOCK:
        server = multiprocessing.forkserver._forkserver  # the stdlib's one fork server
        if server._forkserver_pid is None:
            multiprocessing.set_forkserver_preload(PRELOAD)
            marker = workdir() / "ready"
            # The listener socket's folder (pymp-*) and ours go when the owner does, even when it is SIGKILLed.
            leftovers = [str(workdir()), multiprocessing.util.get_temp_dir()]
            os.environ[READY_ENV] = str(marker)
            os.environ[LEFTOVERS_ENV] = json.dumps({"owner": os.getpid(), "paths": leftovers})
            try:
                with no_main(), sigint_ignored():
                    multiprocessing.forkserver.ensure_running()
            finally:
                os.environ.pop(READY_ENV, None)
                os.environ.pop(LEFTOVERS_ENV, None)
            _STATE["ready"] = marker
        if _STATE["spare"] is None and not _STATE["filling"]:
            _STATE["filling"] = True
            threading.Thread(target=_refill, name="msnb-test-spare", daemon=True).start()


def workdir() -> Path:
    """This process's folder for test-process files (made once, again if something removed it; gone at exit)."""
    with _DIR_LOCK:
        if _STATE["dir"] is None or not _STATE["dir"].is_dir():
            _STATE["dir"] = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
            atexit.register(shutil.rmtree, _STATE["dir"], ignore_errors=True)
        return _STATE["dir"]


def spare_ready() -> bool:
    """True once a spare test process waits (the warm-up started by ``warm_up`` is done)."""
    return _STATE["spare"] is not None


def take() -> tuple[Any, Any]:
    """A started test process and its pipe: the spare when there is one (a new spare is made meanwhile)."""
    with _LOCK:
        spare, _STATE["spare"] = _STATE["spare"], None
    warm_up()
    if spare is not None and spare[0].is_alive():
        return spare
    return spawn()


def spawn() -> tuple[Any, Any]:
    """Fork a test process from the fork server; it waits on its pipe for what to load (``testchild.main``)."""
    main = importlib.import_module(CHILD_MODULE).main  # what the process runs: testchild.main

    context = multiprocessing.get_context("forkserver")
    conn, child = context.Pipe()
    process = context.Process(target=main, args=(child,), daemon=True, name="msnb-test")
    with no_main():
        process.start()
    child.close()
    return process, conn


def discard() -> None:
    """Stop the spare process (at %ms_stop and at exit: nothing is left running)."""
    with _LOCK:
        spare, _STATE["spare"] = _STATE["spare"], None
    if spare is not None:
        spare[1].close()  # EOF: an idle test process exits
        spare[0].join(timeout=2)
        if spare[0].is_alive():
            spare[0].kill()


def _refill() -> None:
    try:
        _wait_ready()
        made = spawn()
        with _LOCK:
            _STATE["spare"] = made
    except Exception:  # the next test forks its own process and reports what fails
        pass
    finally:
        _STATE["filling"] = False


def _wait_ready() -> None:
    """Until the fork server's imports are done: starting a process earlier would hide ``__main__`` meanwhile."""
    marker, deadline = _STATE["ready"], time.monotonic() + READY_WAIT_S
    while marker is not None and not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # polling a file another process writes, with a bound
    if marker is not None and marker.exists():
        marker.unlink(missing_ok=True)
        _STATE["ready"] = None


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while the fork server starts: it inherits the ignored signal, so Jupyter's interrupt of the
    kernel's process group (sent at every shutdown too) cannot end its imports with a KeyboardInterrupt traceback
    (the stdlib ignores SIGINT in the fork server only once its imports are done). Only the main thread may set
    a handler: %load_ext, the first start, runs there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def no_main() -> Iterator[None]:
    """Hide the ``__main__`` module while a process starts: multiprocessing would run a script's (or a CLI's)
    main file again in every test process; a test process needs nothing of it (a notebook's has no file)."""
    main = sys.modules["__main__"]
    with _MAIN_LOCK:
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


def mark_ready() -> None:
    """Called by the fork server when its imports are done (``testchild`` at import)."""
    leftovers = os.environ.pop(LEFTOVERS_ENV, None)
    if leftovers:
        atexit.register(_remove_if_orphaned, **json.loads(leftovers))
        sys.excepthook = quiet_when_orphaned(sys.excepthook)  # inherited by every process it forks
    marker = os.environ.pop(READY_ENV, None)
    if marker:
        try:
            Path(marker).touch()
        except FileNotFoundError:  # the owner exited while we imported and removed its folder: nobody waits
            pass


def quiet_when_orphaned(previous: Any) -> Any:
    """The fork server's excepthook, which a forked process calls on an error before its work starts: an EOF there
    (its owner, a kernel, was killed between the fork and sending what to run) ends it without a traceback on the
    kernel's stderr; any other error prints as before."""

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if not issubclass(kind, EOFError):
            previous(kind, value, tb)

    return hook


def _remove_if_orphaned(owner: int, paths: list[str]) -> None:
    """At the fork server's exit (its owner has gone: multiprocessing ends it then): remove what a killed owner
    could not. An owner that is still there (the fork server was stopped alone) keeps its folders."""
    if os.getppid() == owner:
        return
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
