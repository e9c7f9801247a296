"""Archives onto a running TorchServe: link into its model store, register, swap versions, unregister.

Functions over a ``TorchServeClient`` (HTTP) and a ``ModelStore`` (files); ``LocalServer`` calls them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msnb.engines.models import ModelStatus
from msnb.engines.store import ModelStore, check_identity, read_manifest
from msnb.engines.torchserve.client import TorchServeClient
from msnb.errors import Interrupted, MsnbError, ServerError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_RESPONSE_TIMEOUT_S


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
    check_identity(name, version)
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
    except KeyboardInterrupt:
        # TorchServe goes on registering after the client gave up: take the half-registered version back.
        store.remove(url)
        _abandon(client, name, version)
        raise
    except BaseException:
        store.remove(url)
        raise


DRAIN_TIMEOUT_S = float(DEFAULT_RESPONSE_TIMEOUT_S)  # a batch older than the response timeout has failed anyway
DRAIN_POLL_S = 0.02


def redeploy(client: TorchServeClient, store: ModelStore, path: str | Path, **params) -> ModelStatus:
    """Register the archive as its model's new default version, drain the old ones, then unregister them.

    The new version takes every request that arrives after set-default; each old version answers what it
    already holds (queued and in-flight) before it is unregistered, so no request is lost and none is
    answered by an old version after this returns.
    """
    name, _ = read_manifest(Path(path).expanduser())
    old = client.versions(name)
    status = register(client, store, path, **params)
    if old:
        client.set_default(name, status.version)
        for model in old:
            drain(client, model)
            _forget(client, store, model)
    return client.status(name, status.version)


def drain(client: TorchServeClient, model: ModelStatus) -> None:
    """Wait until a version that no longer takes new requests holds none (queued or in flight).

    TorchServe drops a deleted version's queued jobs (their clients hang) and fails its in-flight batch
    with "Worker died."; its queue length is in the describe answer, and a customized describe queued
    behind the last job returns when that job is answered. A drain that times out or cannot reach the
    server is a ServerError: the caller keeps the old version registered.
    """
    timeout = float(model.response_timeout or DRAIN_TIMEOUT_S)
    deadline = time.monotonic() + timeout
    if model.ready:
        client.barrier(model.name, model.version, timeout)  # False on a timeout: the queue check below decides
    while (pending := _pending(client, model)) > 0:
        if time.monotonic() >= deadline:
            raise ServerError(
                f"{model.name} {model.version} did not drain: {pending} requests were still queued after "
                f"{timeout:g} s. It stays registered and serving what it holds; new requests go to the default.",
                f"unregister it once idle (server.unregister({model.name!r}, {model.version!r})), and give the "
                "handler a larger --response-timeout if its batches take that long.",
            )
        time.sleep(DRAIN_POLL_S)


def _pending(client: TorchServeClient, model: ModelStatus) -> int:
    """Requests the version still holds (0 once it is no longer registered); unreachable is an error."""
    try:
        versions = client.versions(model.name)
    except ServerError as err:
        raise ServerError(
            f"Cannot reach the server while draining {model.name} {model.version} ({err.message}); it stays "
            "registered and serving what it holds.",
            "check the server (server.log_tail()) and unregister the old version when it answers again.",
        ) from None
    return next((m.pending for m in versions if m.version == model.version), 0)


def unregister(client: TorchServeClient, store: ModelStore, name: str, version: str | None = None) -> None:
    """Unregister one version (or every version) of a model; its files are deleted once the server confirms."""
    targets = [m for m in client.versions(name) if version in (None, m.version)]
    if not targets:
        raise client.not_found(name, version)
    for model in sorted(targets, key=lambda m: m.is_default):  # the default version goes last
        _forget(client, store, model)


def _abandon(client: TorchServeClient, name: str, version: str) -> None:
    """Take back a version whose registration was interrupted; if the server refuses, say what remains."""
    try:
        client.unregister_version(name, version, missing_ok=True)
    except ServerError as err:
        raise Interrupted(
            f"Registration of {name} {version} was interrupted and the server still holds it ({err.message}); "
            "its store files were removed, so it cannot load.",
            f"remove it with server.unregister({name!r}, {version!r}) once it has finished loading, or stop "
            "the server.",
        ) from None


def _forget(client: TorchServeClient, store: ModelStore, model: ModelStatus) -> None:
    """Unregister one version; its store files go only when the server no longer lists it."""
    client.unregister_version(model.name, model.version, missing_ok=True)
    if any(m.version == model.version for m in client.versions(model.name)):
        raise ServerError(
            f"TorchServe still lists {model.name} {model.version} after unregistering it; its files are kept.",
            "call server.models() to see what is registered, and server.log_tail() for the server's reason.",
        )
    store.remove(model.url)


def register_many(register: Callable[..., ModelStatus], models: list[tuple[Path, dict]]) -> Iterator[tuple[str, Any]]:
    """Each model folder (or archive) registered with its parameters, one after another (TorchServe registers one
    model per call, its workers start side by side); yields ``(name, ModelStatus)`` for each that serves and
    ``(name, MsnbError)`` for each that does not (the others still register)."""
    for path, params in models:
        try:
            name = read_manifest(Path(path).expanduser())[0]
        except MsnbError as err:
            yield Path(path).name, err
            continue
        try:
            yield name, register(path, **params)
        except MsnbError as err:
            yield name, err
