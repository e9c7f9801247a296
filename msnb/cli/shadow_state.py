"""Where each `msnb shadow` tells `msnb shadow status | split | cutover` how to reach it: one state file per front
(msnb.cli.serve_state's files, in a folder of their own)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from msnb.cli import serve_state
from msnb.errors import MsnbError, OptionError
from msnb.files import state_dir

SHADOWS = "shadows"  # STATE_DIR/shadows/<pid>.json, one per running `msnb shadow`
START_HINT = "start one with msnb shadow STORE --primary URL, or give the --state file it was started with."


@dataclass(frozen=True)
class ShadowRecord:
    """One running `msnb shadow`: its process and folder, its addresses, its key file (the control key), the sides
    and the differences file."""

    pid: int
    project: str
    url: str
    metrics_url: str
    key_file: str
    primary: str
    candidate: str
    log: str

    def describe(self) -> str:
        return f"`msnb shadow` pid {self.pid} in {self.project} ({self.url}: {self.primary} -> {self.candidate})"


def write(record: ShadowRecord, path: Path | None) -> Path:
    """Write ``record`` to ``path`` (default: this front's own file); another live front's file is never overwritten."""
    return serve_state.write(record, path or state_dir() / SHADOWS / f"{os.getpid()}.json")


def find(state: Path | None) -> ShadowRecord:
    """The running front: the one ``state`` names, else the only one recorded."""
    if state is not None:
        record = serve_state.read(state, ShadowRecord)
        if record is None:
            raise MsnbError(f"No `msnb shadow` is running (no live front in {state}).", START_HINT)
        return record
    found = serve_state.running(ShadowRecord, SHADOWS)
    if not found:
        raise MsnbError("No `msnb shadow` is running.", START_HINT)
    if len(found) > 1:
        listing = "; ".join(r.describe() for r in found)
        raise OptionError(f"{len(found)} `msnb shadow` are running: {listing}.", "pick one with --state FILE.")
    return found[0]
