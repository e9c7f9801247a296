"""File moves every layer shares: write-then-rename, link-or-copy, remove a file or a tree."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a hidden sibling and rename it over ``path``: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def link_or_copy(src: str | Path, dst: str | Path, *, symlink_ok: bool = False) -> None:
    """A hard link where the filesystem allows (no copy of a large file), else a symlink (when
    ``symlink_ok``: a temporary staging folder packed by a zip writer) or a copy."""
    dst = Path(dst)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another filesystem
        if symlink_ok:
            dst.symlink_to(Path(src).resolve())
        else:
            shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path) -> None:
    """A folder copied with its files hard-linked (see ``link_or_copy``)."""
    shutil.copytree(src, dst, copy_function=link_or_copy, dirs_exist_ok=True)


def remove(path: Path) -> None:
    """Delete a file, a link or a folder tree; nothing there is fine."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def move_into(src: Path, folder: Path) -> Path:
    """Rename ``src`` into ``folder`` (same filesystem), replacing what has its name there."""
    final = Path(folder) / Path(src).name
    if final.is_dir() and not final.is_symlink():
        shutil.rmtree(final)
    os.replace(src, final)
    return final
