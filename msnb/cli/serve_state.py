"""Where each `msnb serve` tells `msnb predict` how to reach it: one state file per server, chosen by folder or pid;
and what either engine's `msnb serve` says of the archives it could and could not serve."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from msnb.errors import MsnbError, OptionError, ServerError
from msnb.files import STATE_ENV as STATE_ENV  # (re-exported: the tests point it at a scratch folder)
from msnb.files import state_dir, write_atomic

SERVERS = "servers"  # STATE_DIR/servers/<pid>.json, one per running `msnb serve`
START_HINT = "start one with `msnb serve model_store/`, or give --url (and --token-file)."


@dataclass(frozen=True)
class ServerRecord:
    """One running `msnb serve`: its process, the folder it was started in, every address it prints (inference,
    management, metrics, OpenAI's base URL, MCP's endpoint; empty where it has none), its key file and models."""

    pid: int
    project: str
    inference_url: str
    management_url: str
    key_file: str
    models: list[str] = field(default_factory=list)
    engine: str = "torchserve"  # or "ray": `msnb serve --engine ray` (a management URL with TorchServe's options)
    metrics_url: str = ""
    openai_url: str = ""
    mcp_url: str = ""

    def describe(self) -> str:
        models = ", ".join(self.models) or "no models"
        return f"`msnb serve` pid {self.pid} in {self.project} ({self.inference_url}; {models})"


def default_file(pid: int | None = None) -> Path:
    """This server's own state file: STATE_DIR/servers/<pid>.json."""
    return state_dir() / SERVERS / f"{pid or os.getpid()}.json"


def write(record, path: Path | None = None) -> Path:
    """Write ``record`` (a ServerRecord, or another command's record of the same kind); a file that names another
    live process is never overwritten."""
    path = Path(path or default_file(record.pid))
    other = read(path, type(record))
    if other is not None and other.pid != record.pid:
        raise OptionError(
            f"{path} belongs to another running server: {other.describe()}.",
            "leave out --state (each `msnb serve` then keeps its own state file), or give another path.",
        )
    write_atomic(path, json.dumps(asdict(record)))
    return path


def read(path: Path, kind: type = ServerRecord):
    """The record (a ``kind``) in ``path`` when its process still runs (a stale file is removed), else None."""
    try:
        record = kind(**json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not _alive(record.pid):
        Path(path).unlink(missing_ok=True)
        return None
    return record


def running(kind: type = ServerRecord, folder_name: str = SERVERS) -> list:
    """Every live `msnb serve` (or process of another ``kind``) that recorded itself in the state folder (its
    ``folder_name``), oldest pid first."""
    folder = state_dir() / folder_name
    found = [read(p, kind) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return sorted((r for r in found if r is not None), key=lambda r: r.pid)


def choose(records: list[ServerRecord], cwd: Path, pick: str | None = None) -> ServerRecord:
    """The server to ask: the one picked (pid or folder), the only one, or the one whose project holds ``cwd``."""
    if not records:
        raise MsnbError(f"No `msnb serve` is running (no live server in {state_dir() / SERVERS}).", START_HINT)
    if pick is not None:
        chosen = [r for r in records if pick == str(r.pid) or _same(pick, r.project)]
        if len(chosen) != 1:
            raise OptionError(f"--server {pick}: no running server has that pid or folder.", _listing(records))
        return chosen[0]
    if len(records) == 1:
        return records[0]
    holding = [r for r in records if cwd.resolve().is_relative_to(Path(r.project))]
    holding.sort(key=lambda r: len(Path(r.project).parts))
    if holding and (len(holding) == 1 or holding[-1].project != holding[-2].project):
        return holding[-1]  # the innermost project folder that holds the current directory
    raise OptionError(f"{len(records)} `msnb serve` are running; which one should answer?", _listing(records))


def _listing(records: list[ServerRecord]) -> str:
    lines = "; ".join(r.describe() for r in records)
    return f"pick one with --server PID (or its folder), or run msnb predict inside its folder: {lines}."


def _same(pick: str, project: str) -> bool:
    return os.path.isdir(pick) and Path(pick).resolve() == Path(project)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def report(path: Path, err: MsnbError) -> None:
    """One archive that could not be served: its error (with its Hint and worker lines); the others serve on."""
    text = err.render()
    named = str(path) in text.split("\n", 1)[0]  # the message already names the archive: not a second time
    print(f"error: {text}" if named else f"error: {path}: {text}", file=sys.stderr, flush=True)


def served_or_fail(served: list[str], total: int, where: str, hint: str) -> list[str]:
    """``served`` when at least one of ``total`` archives serves (a warning when not all do); else a ServerError."""
    if not served:
        raise ServerError(f"None of the {total} archive(s) could be served{where} (each error is above).", hint)
    if len(served) < total:
        print(f"warning: serving {len(served)} of {total} archives", file=sys.stderr, flush=True)
    return served
