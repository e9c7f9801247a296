"""Code-only edits of a served handler reload inside its live worker (the notebook's local server only).

The first deploy of a handler installs the dev entry (``templates/msnb_runtime/dev/reload.py``) as its model folder's
manifest handler and writes a reload secret (0600) beside it. A later edit that changes only code or
runtime values is staged as ``generations/N/`` in that folder and announced by one inference request that
carries the secret; the worker swaps generations between two batches, with no new process. Any other
change (batch size, workers, device, requirements, checkpoint, version) takes the versioned redeploy.
"""

from __future__ import annotations

import json
import os
import py_compile
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msnb.engines.inference_api import log_details
from msnb.engines.models import ModelStatus
from msnb.engines.protocol import Engine
from msnb.engines.store import MANIFEST
from msnb.errors import ServerError
from msnb.files import disk_error, partial_sibling, remove, replace_tree
from msnb.options import OPTION
from msnb.package import model_folder
from msnb.session.deployment import deploy
from msnb.spec import HandlerSpec
from msnb.templates import DEV_ENTRY, DEV_ROOMS, RUNTIME, copy_runtime, entry_file
from msnb.templates.msnb_runtime.dev.reload import CURRENT, GENERATIONS, RELOAD_HEADER, SECRET_FILE
from msnb.templates.msnb_runtime.handler import serving

RELOAD, NEW_VERSION = "reload", "new version"
# model-config keys the frontend acts on (a change needs a new registration), with the option that sets them
FRONTEND_KEYS = {key: OPTION[name].flag for key, name in serving.FRONTEND_KEYS.items()}
FRONTEND_KEYS[serving.SYSTEM] = "--extra-files / --max-gpu-memory"


@dataclass
class DevModel:
    """A handler served on the local server with the dev entry: its folder, secret and current generation."""

    spec: HandlerSpec
    status: ModelStatus  # as registered (a reload keeps the version)
    model_dir: Path
    secret: str
    pid: int | None
    generation: int = 1
    redeploy: str = NEW_VERSION
    why: str = "first deploy"  # why the last redeploy was (or was not) a reload
    # the weights it serves, taken when they were staged: a live model trained in place since is the same object
    weights: Any = None

    @property
    def version(self) -> str:
        return self.status.version

    def row(self) -> dict[str, Any]:
        return {"generation": self.generation, "redeploy": self.redeploy, "why": self.why}


def install(model_dir: Path) -> str:
    """Make ``model_dir`` (a no-archive folder in the local store) serve through the dev entry; returns its secret."""
    shutil.copy2(entry_file(DEV_ENTRY), model_dir / DEV_ENTRY)
    copy_runtime(model_dir, DEV_ROOMS)  # the entry's work, beside the handler room the folder already holds
    manifest_path = model_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["model"]["handler"] = DEV_ENTRY
    manifest_path.write_text(json.dumps(manifest, indent=2))
    for shared in (model_dir / RUNTIME).rglob("*.py"):  # each generation reuses this bytecode (reuse_bytecode)
        py_compile.compile(str(shared), doraise=True)
    secret = secrets.token_hex(32)
    fd = os.open(model_dir / SECRET_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret)
    return secret


def refusal(known: DevModel | None, spec: HandlerSpec, server_pid: int | None) -> str | None:
    """Why ``spec`` cannot replace what ``known`` serves by a reload (None: it can)."""
    if known is None:
        return "first deploy"
    if known.pid != server_pid:
        return "the server was restarted"
    if spec.workers > 1:
        return f"{spec.workers} workers (each would have to switch)"
    if spec.version != known.spec.version:
        return "--version changed"
    if spec.requirements != known.spec.requirements:  # before the config: requirements also set its useVenv
        return "requirements changed"
    old, new = known.spec.model_config(), spec.model_config()
    changed = sorted({FRONTEND_KEYS.get(k, k) for k in old.keys() | new.keys() if old.get(k) != new.get(k)})
    if changed:
        return f"{', '.join(changed)} changed"
    if checkpoint_identity(spec) != known.weights:
        return "the checkpoint changed (new weights)"
    return None


def checkpoint_identity(spec: HandlerSpec) -> Any:
    """What makes two checkpoints the same: a file's path, size and mtime, or a live object's tensor fingerprint."""
    from msnb.spec import _live_fingerprint

    path = spec.checkpoint_path
    if path is not None:
        st = path.stat() if path.exists() else None
        return (str(path.resolve()), st and st.st_size, st and st.st_mtime_ns)
    return None if spec.checkpoint is None else _live_fingerprint(spec.checkpoint)


class Reloads:
    """The dev models of one notebook session and the choice, per serve, between a reload and a new version."""

    def __init__(self) -> None:
        self.models: dict[str, DevModel] = {}

    def serve(self, server: Engine, spec: HandlerSpec) -> ModelStatus:
        """Reload ``spec`` in the live worker when only code or runtime values changed, else deploy it (its staged
        folder laid out in the engine's store: msnb.session.deploy)."""
        known = self.models.get(spec.name)
        why = refusal(known, spec, server.pid)
        if why is None:
            try:
                return self.reload(server, known, spec)
            except VersionGone:
                why = f"version {known.version} is no longer registered"
        made: dict[str, Any] = {}
        status = deploy(server, spec, prepare=lambda path: made.update(path=path, secret=install(path)))
        weights = checkpoint_identity(spec)
        self.models[spec.name] = DevModel(
            spec, status, made["path"], made["secret"], server.pid, why=why, weights=weights
        )
        return status

    def reload(self, server: Engine, known: DevModel, spec: HandlerSpec) -> ModelStatus:
        """Stage generation N+1, ask the worker to load it; the old generation serves until it has."""
        number = known.generation + 1
        folder = stage_generation(known, spec, number)
        try:
            ask_reload(server, known, number)
        except BaseException:
            remove(folder)
            raise
        try:
            mark_current(known.model_dir, number)
        except OSError as err:  # the worker already serves the new generation: only a restart would miss it
            raise disk_error(known.model_dir / GENERATIONS / CURRENT, err, ServerError) from None
        if known.generation > 1:
            remove(known.model_dir / GENERATIONS / str(known.generation))
        known.spec, known.generation, known.redeploy, known.why = spec, number, RELOAD, "only code or values changed"
        known.weights = checkpoint_identity(spec)
        return known.status

    def row(self, name: str, version: str) -> dict[str, Any]:
        """The generation ``version`` of ``name`` serves and how it was last redeployed (for the status)."""
        known = self.models.get(name)
        return known.row() if known is not None and known.version == version else {}

    def note(self, name: str) -> str:
        """' (generation 3, reloaded in the live worker)' after a reload; '' otherwise (for one-line reports)."""
        known = self.models.get(name)
        if known is None or known.redeploy != RELOAD:
            return ""
        return f" (generation {known.generation}, reloaded in the live worker)"

    def forget(self, name: str | None = None) -> None:
        for key in [name] if name else list(self.models):
            self.models.pop(key, None)


def stage_generation(known: DevModel, spec: HandlerSpec, number: int) -> Path:
    """Stage generation ``number`` whole in a hidden sibling and rename it into ``generations/N``: a full disk
    leaves no half-written generation (the worker would load it at its next restart) and the current one serves."""
    folder = known.model_dir / GENERATIONS / str(number)
    remove(folder)
    previous = known.model_dir / GENERATIONS / str(known.generation) if known.generation > 1 else known.model_dir

    def write() -> None:
        with partial_sibling(folder) as partial:
            # the folder the test ran, as the deploy laid it out (only its version told: the one registered)
            model_folder.relabel(
                model_folder.staged(spec).copied(partial / folder.name), known.version, spec.requirements
            )
            reuse_bytecode(previous, partial / folder.name)
            replace_tree(partial / folder.name, folder)

    _written(write, folder, known)
    return folder


def _written(write: Callable[[], None], final: Path, known: DevModel) -> None:
    """Run ``write``; an OSError (a full disk, a read-only store) is an msnb error that names ``final``."""
    try:
        write()
    except OSError as err:
        remove(final)
        error = disk_error(final, err, ServerError)
        raise ServerError(f"{error.message} Generation {known.generation} keeps serving.", error.hint) from None


def ask_reload(server: Engine, known: DevModel, number: int) -> None:
    """One reload request through the model's inference queue; a refusal or a failed load is a ServerError."""
    client = server.client
    url = f"{client.inference_url}/predictions/{known.spec.name}/{known.version}"
    cursor = client.log_cursor()
    resp = client.call(
        "POST",
        url,
        "inference",
        data=json.dumps({"generation": number}).encode(),
        headers={"Content-Type": "application/json", RELOAD_HEADER: known.secret},
        timeout=known.spec.response_timeout + 5,
    )
    if resp.ok:
        return
    if resp.status_code == 404:
        raise VersionGone(f"{known.spec.name} {known.version} is not registered.", "serve it again.")
    try:
        body = resp.json()
    except ValueError:
        body = {"error": resp.text[:2000]}
    details = log_details(cursor)
    raise ServerError(
        f"Reloading {known.spec.name} failed (HTTP {resp.status_code}): {body.get('error', body)}; "
        f"generation {known.generation} keeps serving.",
        body.get("hint") or "see the worker log (%ms_logs).",
        details=details,
    )


def reuse_bytecode(previous: Path, folder: Path) -> None:
    """Copy the previous generation's compiled shared modules: their sources are copied with their mtimes, so
    the worker imports them from the cache instead of compiling them again (~80 ms a reload here; a worker
    started with PYTHONDONTWRITEBYTECODE writes no cache of its own)."""
    for cache in (previous / RUNTIME).rglob("__pycache__"):
        into = folder / cache.relative_to(previous)
        if into.parent.is_dir():
            into.mkdir(exist_ok=True)
            for pyc in cache.glob("*.pyc"):
                shutil.copy2(pyc, into / pyc.name)


class VersionGone(ServerError):
    """The version a reload was meant for is no longer registered (unregistered by hand)."""


def mark_current(model_dir: Path, number: int) -> None:
    """Record the generation a restarted worker loads (written whole, then renamed into place)."""
    target = model_dir / GENERATIONS / CURRENT
    partial = target.with_name(f".{CURRENT}.partial")
    try:
        partial.write_text(str(number))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
