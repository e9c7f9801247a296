"""What runs inside a test process: load a staged model dir as a TorchServe worker does, then answer batches sent over a pipe.

Imported once by the fork server (so torch and TorchServe are already loaded in every test process it forks).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import torch  # noqa: F401 - imported here once, in the fork server, for every test process it forks
import ts.context  # noqa: F401 - the same for TorchServe's Context

from msnb.capture.local_code import environment_dirs
from msnb.errors import MsnbError
from msnb.templates.msnb_runtime.handler.names import CHECKPOINT
from msnb.trial import worker
from msnb.trial.fork_server import mark_ready

mark_ready()  # imported by the fork server: its imports are done
PR_SET_PDEATHSIG = 1  # prctl option: a signal the kernel sends this process when its parent exits


class Loadable(NamedTuple):
    """The parts of a HandlerSpec a test process needs (the spec itself may hold live objects)."""

    name: str
    batch_size: int
    form: str
    entry: str | None
    checkpoint_name: str = CHECKPOINT  # msnb.package.model_folder.checkpoint_name (the manifest's serializedFile)


def main(conn: Any) -> None:
    """Wait for ``(model_dir, spec, streams)``, load the handler, say so, then answer ``(samples, explain)``
    requests until ``None`` or the pipe closes (a spare process waits here before its first handler)."""
    _die_with_parent()
    # Jupyter interrupts a kernel's whole process group (at every shutdown too): the kernel, not this process,
    # decides what an interrupt ends (it closes a busy test process), so no KeyboardInterrupt traceback here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        setup = conn.recv()
    except EOFError:
        return
    if setup is None:
        return
    model_dir, spec, streams = setup
    log = _redirect(streams)
    _become_worker(model_dir)
    try:
        handler = worker.LoadedHandler(spec, Path(model_dir), isolated=False, echo=log)
    except BaseException as err:  # every failure goes back to the kernel
        conn.send(("error", _error_state(err)))
        return
    budget = getattr(getattr(handler.module, "handle", None), "explain_budget", None)
    if (
        budget is not None
    ):  # one user testing: no predictions to keep explanations from (msnb_runtime.handler.explain_budget)
        budget.share = 1.0
    conn.send(("loaded", _take(handler)))
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the kernel is gone
            return
        if request is None:
            return
        conn.send(_answer(handler, *request))


def _answer(handler: worker.LoadedHandler, samples: list, explain: Any) -> tuple[str, Any]:
    try:
        answers = handler.run(samples, explain)
    except BaseException as err:
        return "error", _error_state(err)
    return "answers", (answers, _take(handler), _fallbacks(handler))


def _take(handler: worker.LoadedHandler) -> list[str]:
    """The log lines since the last reply (and forget them)."""
    lines = handler.log.lines[:]
    handler.log.lines.clear()
    return lines


def _fallbacks(handler: worker.LoadedHandler) -> list[dict]:
    """The shared handler's batch fallbacks since the last reply (an own handler class has none)."""
    recorder = getattr(getattr(handler.module, "handle", None), "fallbacks", None)
    return recorder.take() if recorder is not None else []


def _error_state(err: BaseException) -> tuple[str, str | None, str | None]:
    """An error as (message, hint, details): what the kernel raises as a HandlerRunError."""
    if isinstance(err, MsnbError):
        return err.message, err.hint, err.details
    trace = "".join(traceback.format_exception(err)).rstrip()
    return f"the handler raised {type(err).__name__}: {err}", "the traceback below shows where.", trace


def _die_with_parent() -> None:
    """Be killed when the fork server exits (it exits when the kernel does, even on SIGKILL)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the pipe's EOF still ends an idle process
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _redirect(streams: Any) -> Any:
    """Point fd 1 and 2 (C code and Python alike) at files the kernel reads; a crash dumps the Python stack."""
    for fd, path in ((1, streams.out), (2, streams.err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    faulthandler.enable(sys.stderr)
    return open(streams.log, "a", buffering=1)


def _become_worker(model_dir: str) -> None:
    """A TorchServe worker's view: the model dir first on sys.path and as cwd; no notebook folder on the path."""
    env = environment_dirs()
    keep = [p for p in sys.path if p and any(os.path.realpath(p).startswith(d) for d in env)]
    sys.path[:] = [model_dir, *keep]
    os.chdir(model_dir)
