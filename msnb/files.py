"""File moves every layer shares: write-then-rename, private copies (clone or copy), links, removal."""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from msnb.errors import BuildError, MsnbError

HASH = "sha256"  # hashlib's fastest here with SHA-NI (~1.4 GB/s; blake2b ~0.6 GB/s)

_DISK_HINTS = {
    errno.ENOSPC: "free space on that disk (df -h {folder}) or choose a folder on another disk",
    errno.EDQUOT: "your disk quota is used up: free space (df -h {folder}) or choose a folder on another disk",
    errno.EROFS: "{folder} is on a read-only filesystem: choose another folder",
    errno.EACCES: "you cannot write into {folder}: choose a folder you can write to, or fix its permissions",
    errno.EPERM: "you cannot write into {folder}: choose a folder you can write to, or fix its permissions",
}
DISK_ERRNOS = frozenset(_DISK_HINTS)
REPLACE_ATTEMPTS = 100  # replace_tree's renames when other writers of the same name keep winning the race


STATE_ENV = "MSNB_STATE_DIR"  # where msnb's state files live (`msnb serve`'s, the shared Ray's)


def state_dir() -> Path:
    """$MSNB_STATE_DIR, else ~/.cache/msnb."""
    return Path(os.environ.get(STATE_ENV) or Path.home() / ".cache" / "msnb")


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


FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int): share the source's extents, copy-on-write
# What a filesystem (or a kernel) says when it cannot clone or copy in-kernel between these two files.
_NO_KERNEL_COPY = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS}


def clone_file(src: str | Path, dst: str | Path) -> str:
    """A private copy of ``src`` at ``dst`` that no later write to ``src`` reaches; returns how it was made.

    A copy-on-write clone where the filesystem shares extents (btrfs, xfs, bcachefs: instant, no space
    used), else the kernel copies (``copy_file_range``: no trip through Python), else a plain copy. A hard
    link or a symlink would not do: ``torch.save`` to the same path rewrites the same inode, and a worker
    that memory-maps its checkpoint would serve whatever was written.
    """
    dst = Path(dst)
    dst.unlink(missing_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        how = _copy_open(fin, fout)
    shutil.copystat(src, dst)  # mode and mtime, as shutil.copy2 keeps them
    return how


def _copy_open(fin: BinaryIO, fout: BinaryIO) -> str:
    try:
        fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
        return "clone"
    except OSError as err:
        if err.errno not in _NO_KERNEL_COPY:
            raise
    if _kernel_copy(fin.fileno(), fout.fileno(), os.fstat(fin.fileno()).st_size):
        return "kernel copy"
    fin.seek(0)
    fout.seek(0)
    fout.truncate()
    shutil.copyfileobj(fin, fout, 1 << 20)
    return "copy"


def _kernel_copy(fin: int, fout: int, size: int) -> bool:
    """``copy_file_range`` until ``size`` bytes are copied; False when the kernel cannot do it here."""
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(fin, fout, size - done)
            if n == 0:  # the source shrank while it was copied: what is there is the copy
                break
            done += n
    except OSError as err:
        if err.errno not in _NO_KERNEL_COPY:
            raise
        return False
    return True


def clone_tree(src: Path, dst: Path) -> None:
    """A folder copied with its files cloned (see ``clone_file``): nothing in ``dst`` shares an inode with ``src``
    (links are followed). The first OSError is raised as it is (its errno names a full disk), unlike copytree's
    shutil.Error that collects them."""
    for source, dest in mirrored(src, dst, followlinks=True):
        clone_file(source, dest)


def mirrored(src: Path, dst: Path, *, followlinks: bool = False) -> Iterator[tuple[Path, Path]]:
    """Each file of the folder ``src`` with its place under ``dst``, whose folders are made as the walk goes."""
    src, dst = Path(src), Path(dst)
    for dirpath, _dirnames, filenames in os.walk(src, followlinks=followlinks):
        here = dst / Path(dirpath).relative_to(src)
        here.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            yield Path(dirpath) / name, here / name


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


@contextmanager
def written_into(outdir: Path, prefix: str) -> Iterator[Path]:
    """A hidden folder inside ``outdir`` to write a layout in: when the block ends well, everything in it moves into
    ``outdir`` (replacing what has its name there), so a failure leaves ``outdir`` as it was; the folder goes either
    way. An OSError is a BuildError naming ``outdir``."""
    outdir = Path(outdir)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=prefix, dir=outdir))
        try:
            yield staging
            for item in sorted(staging.iterdir()):
                move_into(item, outdir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        raise BuildError(
            f"Cannot write into {str(outdir.resolve())!r}: {err}.", "check the folder's permissions."
        ) from None


@contextmanager
def partial_sibling(final: Path) -> Iterator[Path]:
    """A hidden empty folder beside ``final`` (same filesystem: what is built there renames into place), removed
    with whatever it still holds when the block ends, failed or not."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        yield partial
    finally:
        remove(partial)


def replace_tree(src: Path, final: Path) -> Path:
    """Rename ``src`` (a file or folder) to ``final``, replacing what is there; the same filesystem. What was there
    is first renamed aside (then removed): a reader never sees half a folder, and of two writers of one name at once
    the last one's stays whole."""
    final = Path(final)
    for attempt in range(REPLACE_ATTEMPTS):
        try:
            os.replace(src, final)
            return final
        except OSError as err:  # a folder, or a file where a folder goes (or the other way round)
            if (
                err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR)
                or attempt == REPLACE_ATTEMPTS - 1
            ):
                raise
        aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
        try:
            os.replace(final, aside / final.name)
        except FileNotFoundError:  # another writer moved it first
            pass
        finally:
            remove(aside)


def disk_error(final: Path, err: OSError, error: type[MsnbError] = BuildError) -> MsnbError:
    """An OSError while writing ``final`` (full disk, no permission, read-only) as an msnb error with its hint."""
    folder = Path(final).parent
    where = f" ({err.filename})" if err.filename and str(err.filename) != str(final) else ""
    hint = _DISK_HINTS.get(err.errno, "check free disk space and the folder's permissions, or choose another folder")
    return error(
        f"Could not write {final}: {err.strerror or err}{where}. Nothing half-written was left there.",
        hint.format(folder=folder),
    )


def write_error(folder: Path, err: OSError) -> BuildError:
    """An OSError while writing into ``folder`` (an export's output) as a BuildError with its hint."""
    if err.errno in DISK_ERRNOS:  # full disk, read-only, no permission: free space or choose another folder
        return disk_error(folder, err)
    return BuildError(
        f"Cannot write into {str(folder.resolve())!r}: {err}.",
        "check what is already there (a file where a folder goes, or the reverse) and its permissions.",
    )


def fingerprint(path: str | Path) -> str:
    """The content hash of the file at ``path``, cached per (inode, size, mtime): read again only after a write."""
    st = os.stat(path)
    return _hash(str(Path(path).resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=256)
def _hash(path: str, *stat_key: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, HASH).hexdigest()
