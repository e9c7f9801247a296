"""What TorchServe refuses in a management call, in its words (status, exception type, message), and where it finds
a register call's archive (``ModelArchive.downloadModel``); msnb's own refusals keep TorchServe's type, with a Hint."""

from __future__ import annotations

from pathlib import Path

from msnb.errors import MsnbError, ServerError


class RegistryError(ServerError):
    """A management call TorchServe refuses too: its HTTP ``status`` and TorchServe's exception ``kind``."""

    def __init__(self, status: int, kind: str, message: str, hint: str = ""):
        super().__init__(message, hint)
        self.status, self.kind = status, kind


def archive_path(url: str, store: Path | None, anywhere: bool = False) -> Path:
    """``url`` as TorchServe's ``ModelArchive.downloadModel`` finds it: a file name in the model store (a path
    that does not exist: its file name there); ``anywhere``: an absolute path too (the archives given on the
    command line). msnb fetches no remote URL and reads no ``file://`` URL (outside the store)."""
    if anywhere and Path(url).is_absolute() and Path(url).exists():
        return Path(url)
    if not url:
        raise RegistryError(404, "ModelNotFoundException", "empty url")
    if "://" in url:
        raise remote_refused(url)
    if ".." in Path(url).parts:
        raise RegistryError(404, "ModelNotFoundException", f"Relative path is not allowed in url: {url}")
    path = store / Path(url).name if store else Path(url)
    if store is None or not path.exists() or (not Path(url).is_absolute() and Path(url).name != url):
        raise RegistryError(404, "ModelNotFoundException", f"Model not found at: {url}")
    return path


def failed_workers(name: str, version: str, err: MsnbError) -> RegistryError:
    """TorchServe's 500 for workers that did not start, the replica's own words in its Hint."""
    why = f"the replicas said: {err.message}" + (f" {err.hint}" if err.hint else "")
    return RegistryError(
        500, "InternalServerException", f"Failed to start workers for model {name} version: {version}", why
    )


def remote_refused(url: str) -> RegistryError:
    """A URL msnb does not fetch: a remote one is TorchServe's 400 DownloadArchiveException (as when it cannot fetch
    it), a ``file://`` one (anywhere on the machine) a 400 of msnb's own; each with where the archive goes instead."""
    hint = "copy the archive into the model store and register it by its file name."
    if url.lower().startswith("file:"):
        return RegistryError(400, "BadRequestException", f"A file:// URL is not read by msnb: {url}", hint)
    return RegistryError(
        400,
        "DownloadArchiveException",
        f"Failed to download archive from: {url}",
        f"msnb fetches no remote archive: {hint}",
    )


__all__ = ["RegistryError", "archive_path", "failed_workers", "remote_refused"]
