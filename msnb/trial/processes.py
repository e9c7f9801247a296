"""Test processes: each staged model folder (a handler generation) is tested in its own child process, forked from a
warm fork server.

The kernel never imports the rendered handler: its ``sys.modules``, ``sys.path`` and working directory stay
as they are, and a handler that ends its process (``os._exit``, a segfault) ends a test process, reported like a
TorchServe worker crash. The fork server imports torch and TorchServe once (``warm_up``, started when msnb
loads); each new handler generation gets a fresh process forked from it, and an unchanged handler is answered
by the process that loaded it, as a worker answers request after request.
"""

from __future__ import annotations

import atexit
import signal
import sys
import tempfile
import threading
from collections import namedtuple
from pathlib import Path
from typing import Any

from msnb.errors import HandlerRunError
from msnb.files import disk_error
from msnb.package.model_folder import ModelFolder
from msnb.templates.msnb_runtime.handler.names import CHECKPOINT
from msnb.trial import fork_server

TAIL_LINES = 20  # how many of a crashed test process's last lines each stream shows
FATAL_LINES = 60  # ... and of the stack Python dumps on a crash (faulthandler), from its headline on
FATAL_HEADLINE = "Fatal Python error"
Streams = namedtuple("Streams", "out err log")  # a test process's stdout, stderr and handler log files
_LOCK = threading.Lock()
_WORKERS: dict[str, "TestWorker"] = {}  # handler name -> the process testing its latest generation
warm_up = fork_server.warm_up


def run(folder: ModelFolder, samples: list, explain: Any = False) -> tuple[list, list[str], list[dict]]:
    """Answer ``samples`` as one batch in ``folder``'s test process: (answers, log lines, batch fallbacks)."""
    return worker_for(folder).run(samples, explain)


def worker_for(folder: ModelFolder) -> "TestWorker":
    """The live test process of this very generation of the folder's handler; a new one (the old one stopped)
    otherwise."""
    name, key = folder.name, folder.generation
    with _LOCK:
        worker = _WORKERS.get(name)
        if worker is not None and worker.key == key and worker.alive:
            return worker
        if worker is not None:
            worker.close()
        worker = _WORKERS[name] = TestWorker(folder)
        try:
            worker.start()
        except BaseException:
            _WORKERS.pop(name, None)
            worker.close()
            raise
    return worker


def close(name: str | None = None) -> None:
    """Stop the test process of ``name`` (every one, and the spare, by default)."""
    with _LOCK:
        names = list(_WORKERS) if name is None else [name]
        for worker in [_WORKERS.pop(n) for n in names if n in _WORKERS]:
            worker.close()
    if name is None:
        fork_server.discard()


atexit.register(close)


class TestWorker:
    """One test process: the model folder it runs, its pipe, and the files its output goes to."""

    __test__ = False  # not a pytest test

    def __init__(self, folder: ModelFolder):
        self.folder, self.spec, self.key = folder, folder.spec, folder.generation
        self.tmp = tempfile.TemporaryDirectory(prefix="msnb-test-", dir=fork_server.workdir())
        root = Path(self.tmp.name)
        self.streams = Streams(*(str(root / f"{s}.txt") for s in Streams._fields))
        self.read_at = dict.fromkeys(Streams._fields, 0)
        self.lock = threading.Lock()
        self.process: Any = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def start(self) -> None:
        """Link the model folder into the process's own model dir (what the handler writes there stays there, as in
        a worker's), fork the process and wait until it has loaded (or raise its load error)."""
        from msnb.trial.child import Loadable  # torch and TorchServe: imported when a test needs them

        try:
            model_dir = self.folder.linked(Path(self.tmp.name) / "model").path
            for path in self.streams:
                Path(path).touch(mode=0o600)
        except OSError as err:  # a full or read-only $TMPDIR: worker_for removes what was written
            raise disk_error(Path(self.tmp.name) / "model", err, HandlerRunError) from None
        self.process, self.conn = fork_server.take()
        loadable = Loadable(
            self.spec.name, self.spec.batch_size, self.spec.form, self.spec.entry, self.folder.checkpoint or CHECKPOINT
        )
        self.conn.send((str(model_dir), loadable, self.streams))
        with self.lock:
            self._reply("loading")

    def run(self, samples: list, explain: Any) -> tuple[list, list[str], list[dict]]:
        with self.lock:
            self.conn.send((samples, explain))
            return self._reply("answering")

    def _reply(self, doing: str) -> Any:
        try:
            kind, value = self.conn.recv()
        except EOFError:
            kind, value = "crashed", None
        except BaseException:  # Ctrl-C: the process is mid-request, it cannot be trusted again
            self.close()
            raise
        self._relay()
        if kind == "crashed":
            error = self._crashed(doing)
            self.close()
            raise error
        if kind == "error":
            raise HandlerRunError(*value)
        return value

    def _relay(self) -> None:
        """Show what the handler printed since the last reply, as the kernel would have shown it."""
        for stream, target in (("out", sys.stdout), ("err", sys.stderr)):
            text = self._read_new(stream)
            if text:
                target.write(text)
                target.flush()

    def _read_new(self, stream: str) -> str:
        with open(getattr(self.streams, stream), "rb") as f:
            f.seek(self.read_at[stream])
            data = f.read()
        self.read_at[stream] += len(data)
        return data.decode(errors="replace")

    def _crashed(self, doing: str) -> HandlerRunError:
        """The process ended without answering: an error like TorchServe's "Worker died.", with its last lines."""
        self.process.join(timeout=5)
        code = self.process.exitcode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        return HandlerRunError(
            f"The test process of {self.spec.name!r} died ({how}) while {doing}: on TorchServe its worker would "
            'crash the same way (500 "Worker died." for every request of the batch). The kernel is unaffected.',
            "the handler (or a library it calls) ended the process: os._exit() or sys.exit() in a role, a "
            "segfault or abort in native code, or running out of memory. Its last lines are below.",
            details=self._tails(),
        )

    def _tails(self) -> str | None:
        parts = []
        for stream, title in (("err", "stderr"), ("log", "handler log"), ("out", "stdout")):
            lines = last_lines(Path(getattr(self.streams, stream)).read_text(errors="replace").splitlines())
            if lines:
                parts.append(f"--- last lines of the test process's {title}:\n" + "\n".join(lines))
        return "\n".join(parts) or None

    def close(self) -> None:
        """Stop the process (politely, then by force) and delete its staged model dir and output files."""
        if self.process is not None and self.process.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(timeout=2)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
        self.tmp.cleanup()


def last_lines(lines: list[str]) -> list[str]:
    """A stream's last TAIL_LINES lines; from its last ``Fatal Python error`` on, when the stack Python dumped on a
    crash is longer (its headline and the user's frame come first in that dump, at most FATAL_LINES lines)."""
    fatal = [i for i, line in enumerate(lines) if line.startswith(FATAL_HEADLINE)]
    if fatal and len(lines) - fatal[-1] > TAIL_LINES:
        return lines[fatal[-1] : fatal[-1] + FATAL_LINES]
    return lines[-TAIL_LINES:]
