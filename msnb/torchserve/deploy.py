"""Archives onto a running TorchServe: link into its model store, register, swap versions, unregister.

Functions over a ``TorchServeClient`` (HTTP) and a ``ModelStore`` (files); ``LocalServer`` calls them.
"""

from __future__ import annotations

from pathlib import Path

from msnb.errors import ServerError
from msnb.torchserve.client import TorchServeClient
from msnb.torchserve.models import ModelStatus
from msnb.torchserve.store import ModelStore, read_manifest


def register(
    client: TorchServeClient,
    store: ModelStore,
    path: str | Path,
    *,
    workers: int | None = None,
    batch_size: int | None = None,
    max_batch_delay: int | None = None,
    response_timeout: int | None = None,
) -> ModelStatus:
    """Link a .mar or a no-archive folder into the model store, register it, wait for a ready worker."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ServerError(f"No model archive at {path}.", "build one first (msnb.build / %ms_build).")
    name, version = read_manifest(path)
    if any(m.version == version for m in client.versions(name)):
        raise ServerError(
            f"{name} {version} is already registered on this server.",
            "use server.redeploy(path) to replace it, or server.unregister(name) first.",
        )
    url = store.place(path, name, version)
    try:
        return client.register(
            url,
            name,
            version,
            workers=workers,
            batch_size=batch_size,
            max_batch_delay=max_batch_delay,
            response_timeout=response_timeout,
        )
    except BaseException:
        store.remove(url)
        raise


def redeploy(client: TorchServeClient, store: ModelStore, path: str | Path, **params) -> ModelStatus:
    """Register the archive as its model's new default version and unregister the old ones; no restart."""
    name, _ = read_manifest(Path(path).expanduser())
    old = client.versions(name)
    status = register(client, store, path, **params)
    if old:
        client.set_default(name, status.version)
        for model in old:
            _forget(client, store, model)
    return client.status(name, status.version)


def unregister(client: TorchServeClient, store: ModelStore, name: str, version: str | None = None) -> None:
    """Unregister one version (or every version) of a model and delete its files from the model store."""
    targets = [m for m in client.versions(name) if version in (None, m.version)]
    if not targets:
        raise client.not_found(name, version)
    for model in sorted(targets, key=lambda m: m.is_default):  # the default version goes last
        _forget(client, store, model)


def _forget(client: TorchServeClient, store: ModelStore, model: ModelStatus) -> None:
    client.unregister_version(model.name, model.version, missing_ok=True)
    store.remove(model.url)
