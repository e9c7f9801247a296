"""What a build took from the user's folder (checkpoint, extra files, local modules), and which of it changed since.

Each file is recorded with its size, mtime and a content hash. A check compares the stat first and hashes
only a file whose stat changed (a file saved again with the same bytes is unchanged): a 1 GiB checkpoint is
hashed once per save, not on every ``%ms_status``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msnb.files import fingerprint


@dataclass(frozen=True)
class BuildInputs:
    """One file as a build took it: where it was read from, its size, mtime and content hash."""

    path: str
    size: int
    mtime_ns: int
    digest: str

    @property
    def name(self) -> str:
        return Path(self.path).name


def take(path: str | Path) -> BuildInputs:
    """The record of one file as it is now."""
    path = Path(path).expanduser().resolve()
    st = path.stat()
    return BuildInputs(str(path), st.st_size, st.st_mtime_ns, fingerprint(path))


def taken_by(spec: Any) -> tuple[BuildInputs, ...]:
    """Every file a build of ``spec`` copies from the user's folder (the files that exist now)."""
    paths: list[Path] = []
    if spec.checkpoint_path is not None:
        paths.append(spec.checkpoint_path)
    for extra in map(Path, spec.extra_files):
        extra = extra.expanduser()
        paths += sorted(p for p in extra.rglob("*") if p.is_file()) if extra.is_dir() else [extra]
    paths += [Path(item.source) for item in spec.bundle]
    return tuple(take(p) for p in paths if p.is_file())


def changed(files: tuple[BuildInputs, ...]) -> list[BuildInputs]:
    """The files whose content is not what was taken (deleted ones too); same stat means unchanged."""
    return [f for f in files if not _same(f)]


def _same(taken: BuildInputs) -> bool:
    try:
        st = os.stat(taken.path)
    except OSError:
        return False
    if (st.st_size, st.st_mtime_ns) == (taken.size, taken.mtime_ns):
        return True
    return st.st_size == taken.size and fingerprint(taken.path) == taken.digest


def describe(files: list[BuildInputs]) -> str:
    """'model.pth' or 'model.pth and vocab.json' (the files' names, for a message)."""
    names = [f"{f.name!r}" for f in files]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
