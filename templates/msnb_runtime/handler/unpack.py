"""Unpacking an untrusted archive (a .mar, a tgz model archive, an extra-files archive) into one folder, safely.

Every member is checked before anything is written: a path that leaves the folder (``..``, absolute, a drive), a
link pointing out of it, a device or fifo, or members inflating past a bound refuse the whole archive, and nothing is
unpacked. Used by the shared handler for extra files (``handler.load``) and by msnb for the archives it serves on Ray.
Depends only on the standard library.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath, PureWindowsPath

# The most an archive may inflate to; a .mar holds the weights, so the bound is large, and it is also refused when
# the folder's disk has less room than that.
MAX_UNPACKED_BYTES = int(os.environ.get("MSNB_MAX_UNPACKED_BYTES") or 64 * 2**30)


class UnsafeArchiveError(ValueError):
    """An archive refused before anything of it was unpacked; the message names the member, ``hint`` the fix."""

    def __init__(self, message: str, hint: str):
        self.message, self.hint = message, hint
        super().__init__(f"{message}\nHint: {hint}")


REBUILD_HINT = "rebuild the archive with paths relative to its root, e.g. `tar -C dir -czf deps.tgz .`"
# A model archive (.mar, a zip) is rebuilt by torch-model-archiver, not tar.
MAR_HINT = "rebuild it with torch-model-archiver from files inside one folder (no absolute paths, no '..' in them)"


def rebuild_hint(archive: Path) -> str:
    """How to rebuild ``archive`` without the member it was refused for: a model archive or a tar of files."""
    return MAR_HINT if archive.suffix.lower() in (".mar", ".zip") else REBUILD_HINT


def check_path(archive: Path, name: str) -> PurePosixPath:
    """The member's path inside the folder; refused when absolute, on a drive or climbing out with ``..``."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or PureWindowsPath(name).drive or ".." in path.parts:
        raise UnsafeArchiveError(
            f"{archive.name} has an unsafe member {name!r} (absolute path or '..').", rebuild_hint(archive)
        )
    return path


def check_link(archive: Path, name: str, target: str) -> None:
    """A link member is refused when its target, read from the member's own folder, leaves the archive's root."""
    where = PurePosixPath(name.replace("\\", "/")).parent / target.replace("\\", "/")
    depth = 0
    for part in where.parts if not PurePosixPath(target).is_absolute() else ("..",):
        depth += -1 if part == ".." else 0 if part in (".", "") else 1
        if depth < 0:
            raise UnsafeArchiveError(
                f"{archive.name} has a link {name!r} pointing out of its folder ({target!r}).",
                "rebuild the archive with the file itself instead of a link to it.",
            )


def check_size(archive: Path, total: int, dest: Path, limit: int | None) -> None:
    """Refuse members that would inflate past ``limit`` bytes or past the room left on ``dest``'s disk."""
    limit = MAX_UNPACKED_BYTES if limit is None else limit
    probe = dest if dest.exists() else dest.parent
    room = shutil.disk_usage(probe).free if probe.exists() else limit
    if total > min(limit, room):
        raise UnsafeArchiveError(
            f"{archive.name} would inflate to {total} bytes, over the bound of {min(limit, room)} bytes "
            f"({'MSNB_MAX_UNPACKED_BYTES' if limit <= room else 'free space on ' + str(probe)}).",
            "check where the archive came from (a small file inflating this much is a zip bomb); a real model this "
            "large needs MSNB_MAX_UNPACKED_BYTES raised and the disk room for it.",
        )


def _zip_checked(archive: Path, zf: zipfile.ZipFile) -> int:
    total = 0
    for info in zf.infolist():
        check_path(archive, info.filename)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            check_link(archive, info.filename, zf.read(info).decode("utf-8", "replace"))
        elif kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeArchiveError(f"{archive.name} has a special file {info.filename!r}.", rebuild_hint(archive))
        total += info.file_size
    return total


def _tar_checked(archive: Path, tf: tarfile.TarFile) -> int:
    total = 0
    for member in tf.getmembers():
        check_path(archive, member.name)
        if member.issym() or member.islnk():
            check_link(archive, member.name if member.issym() else ".", member.linkname)
        elif not (member.isfile() or member.isdir()):
            raise UnsafeArchiveError(f"{archive.name} has a special file {member.name!r}.", REBUILD_HINT)
        total += member.size
    return total


def unpack_archive(archive: Path, dest: Path, limit: int | None = None) -> None:
    """Extract a zip (a .mar) or tar (.tar.gz, .tgz, .tar) ``archive`` into ``dest`` keeping its folders, after
    checking every member (``UnsafeArchiveError`` when one is refused: then nothing is written)."""
    archive, dest = Path(archive), Path(dest)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            check_size(archive, _zip_checked(archive, zf), dest, limit)
            zf.extractall(dest)
        return
    with tarfile.open(archive) as tf:
        check_size(archive, _tar_checked(archive, tf), dest, limit)
        tf.extractall(dest, filter="data")  # the same refusals again, by Python's own filter
