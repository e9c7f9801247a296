"""Read a TorchServe's logs: what the workers wrote since a call started, from the first traceback on."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from pathlib import Path

from msnb.engines.torchserve.config import FRONTEND_LOG, MODEL_LOG
from msnb.engines.tracebacks import user_frames

# "2026-11-22T07:26:20,310 [INFO ] W-9000-echo_1.0-stdout MODEL_LOG - text" -> "text"
_PREFIX = re.compile(r"^\d{4}-\d\d-\d\dT[\d:,.]+ \[\s*\w+\s*\] \S+ \S+ - ")
# TorchServe retries a failed handler import as ts.torch_handler.<module>: that second error misleads.
_FALLBACK = "No module named 'ts.torch_handler."
MAX_LINES = 60
CRASH_LINES = 20
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(: |$)")  # "ValueError: ...", "pkg.mod.LoadError: ...", "KeyboardInterrupt"
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
# the thread name of a worker's lines: W-<port>-<model>_<version>[-stdout|-stderr]
_WORKER = re.compile(r"^\d{4}-\d\d-\d\dT[\d:,.]+ \[\s*\w+\s*\] W-\d+-(.+?)_[^_ ]+?(?:-std\w+)? ")


class LogCursor:
    """Offsets into a server's log files; ``since()`` returns what was appended after them."""

    def __init__(self, log_dir: Path, names: tuple[str, ...] = (MODEL_LOG, FRONTEND_LOG)):
        self.paths = [Path(log_dir) / name for name in names]
        self.offsets = [_size(p) for p in self.paths]

    def new_text(self, index: int = 0) -> str:
        path, offset = self.paths[index], self.offsets[index]
        try:
            with path.open("rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def details(self) -> str:
        """The worker's traceback since the cursor (or the frontend's errors when there is none)."""
        lines = worker_error(self.new_text(0))
        if not lines:
            lines = frontend_errors(self.new_text(1))
        return "\n".join(lines[-MAX_LINES:])

    def crash(self) -> str:
        """What the workers wrote since the cursor (a faulthandler stack, or their last output), the frontend's
        errors (e.g. a response timeout) and how the worker ended; empty until TorchServe logs the disconnect."""
        frontend = self.new_text(1)
        ended = [strip_prefix(line) for line in frontend.splitlines() if "Worker disconnected" in line]
        if not ended:
            return ""
        lines = [line for line in map(strip_prefix, self.new_text(0).splitlines()) if not _is_noise(line)]
        out = lines[-CRASH_LINES:] or ["(the worker wrote nothing before it ended)"]
        out += frontend_errors(frontend)
        return "\n".join([*out, f"TorchServe: {ended[0].strip()} (the worker process ended; it is restarted)"])


def strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line.rstrip("\n"))


def worker_error(text: str) -> list[str]:
    """Lines from the first traceback on, without TorchServe's misleading import fallback."""
    lines = [strip_prefix(line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), None)
    if start is None:
        return []
    kept: list[str] = []
    for i, line in enumerate(lines[start:], start):
        if line.startswith("During handling of the above exception") and any(
            _FALLBACK in later for later in lines[i : i + 40]
        ):
            break
        if _FALLBACK in line:
            continue
        kept.append(line)
    return user_frames(first_chain([line for line in kept if not _is_noise(line)]))


def first_chain(lines: list[str]) -> list[str]:
    """The first traceback chain, to its last exception line and the ``Hint:`` after it: TorchServe logs a failed
    load again ("Load model ... exception ...", the same traceback once more), which would only repeat the cause."""
    for i, line in enumerate(lines):
        if not _EXCEPTION.match(line) or line.startswith("Hint:"):
            continue
        after = [later for later in lines[i + 1 : i + 4] if later.strip()]
        if after and after[0].startswith(_CHAINED):
            continue
        return lines[: i + 1] + ([after[0]] if after and after[0].startswith("Hint:") else [])
    return lines


def model_lines(text: str, name: str, lines: int) -> list[str]:
    """The last ``lines`` lines a model's workers wrote (any version), prefixes stripped."""
    mine = [strip_prefix(line) for line in text.splitlines() if (m := _WORKER.match(line)) and m.group(1) == name]
    return mine[-lines:]


def worker_progress(log: Path, name: str) -> Callable[[], str]:
    """What ``name``'s worker does now: the newest line it wrote to ``log`` since this call (for a progress bar)."""
    start = log.stat().st_size if log.exists() else 0

    def detail() -> str:
        with log.open("rb") as f:
            f.seek(start)
            lines = model_lines(f.read().decode("utf-8", "replace"), name, 1)
        return f"worker: {lines[-1][:70]}" if lines else "waiting for a worker"

    return detail


def frontend_errors(text: str) -> list[str]:
    """ERROR/WARN records of ts_log.log with their continuation lines (e.g. pip's message), no Java frames."""
    out: list[str] = []
    keep = False
    for line in text.splitlines():
        if _PREFIX.match(line):
            keep = bool(re.search(r"\[(ERROR|WARN)\s*\]", line))
            line = strip_prefix(line)
        elif line.startswith(("\tat ", "\t... ")):
            continue
        if keep and line.strip():
            out.append(line)
    return out


def _is_noise(line: str) -> bool:
    return not line.strip() or line.startswith(
        ("Backend worker process died", "Backend response time", "Backend received inference at", "Extension modules:")
    )


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a file, prefixes stripped (empty when it does not exist)."""
    try:
        with Path(path).open("r", encoding="utf-8", errors="replace") as f:
            return [strip_prefix(line) for line in deque(f, maxlen=lines)]
    except OSError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
