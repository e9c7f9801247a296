"""What the session knows and tells: served versions, built archives (read back from disk), change events."""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from msnb.engines.store import safe_name
from msnb.package.build_inputs import BuildInputs
from msnb.package.render import HANDLER_MODULE, read_provenance

logger = logging.getLogger(__name__)
EVENTS = ("served", "stopped", "built", "defined")


@dataclass(frozen=True)
class Served:
    """A handler as the server runs it: the version it was registered as and the spec digest it came from."""

    name: str
    version: str
    digest: str
    cell_digest: str | None = None  # the cell's spec when it was served (the widget may serve its own edits)
    files: tuple[BuildInputs, ...] = ()  # what the build took from the user's folder (checkpoint, extra files, modules)

    def line(self) -> str:
        return f"{self.name} v{self.version} (digest {self.digest})"


@dataclass(frozen=True)
class Built:
    """An archive on disk and the handler it packs (read from its handler_model.py header)."""

    path: Path
    name: str
    version: str
    digest: str


class Observers:
    """Callbacks told ``(event, name)`` after each change; a failing observer never breaks the action."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[str, str | None], None]] = []

    def subscribe(self, callback: Callable[[str, str | None], None]) -> Callable[[], None]:
        """Add ``callback``; returns the function that removes it again."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def notify(self, event: str, name: str | None = None) -> None:
        for callback in list(self._callbacks):
            try:
                callback(event, name)
            except Exception:  # a broken view must not fail a serve or a stop
                logger.warning("msnb: an observer failed on %s", event, exc_info=True)


def read_built(path: Path) -> Built | None:
    """The handler an archive (.mar / zip-store) or a no-archive folder packs; None when it is not msnb's."""
    path = Path(path)
    try:
        if path.is_dir():
            header = (path / f"{HANDLER_MODULE}.py").read_text()[:1000]
        else:
            with zipfile.ZipFile(path) as zf:
                header = zf.read(f"{HANDLER_MODULE}.py")[:1000].decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = read_provenance(header)
    return Built(path, **found) if found else None


def builds_in(folder: Path, name: str) -> list[Built]:
    """The archives of handler ``name`` in ``folder`` (any version), oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    candidates = sorted(folder.glob(f"{name}*.mar"), key=lambda p: p.stat().st_mtime)
    return [b for b in map(read_built, candidates) if b is not None and b.name == name]


def keep_aside(target: Path, version: str) -> Path | None:
    """Before a build replaces ``target``: rename an archive of another version to ``NAME-VERSION.mar`` (``safe_name``).

    Returns where the older archive went (None when there was nothing of another version to keep).
    """
    old = read_built(target) if target.is_file() else None
    if old is None or old.version == version:
        return None
    kept = target.with_name(safe_name(target.stem, old.version) + target.suffix)
    target.replace(kept)
    return kept
