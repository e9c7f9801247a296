"""TorchServe's model registry on the local Ray: archives of the model store registered under a name with the settings
TorchServe takes (the register call's, ``models={...}``, config.properties' defaults), scaled and unregistered.

Several versions of one name are served side by side, as TorchServe serves them: each version is a Serve
application, the default version's named after the model (``/predictions/NAME``), each other one's
``NAME@VERSION`` at ``/predictions/NAME/VERSION``; setting another default version swaps which folder each serves.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from msnb.engines.models import ModelStatus
from msnb.engines.ray.ts_params import NO_BATCH_DELAY, NO_BATCH_SIZE, NO_TIMEOUT
from msnb.engines.ray.ts_refusals import RegistryError, archive_path, failed_workers
from msnb.engines.store import safe_name
from msnb.engines.ts_properties import TsConfig
from msnb.errors import MsnbError
from msnb.templates.msnb_runtime.handler.names import SEGMENT_RULE, valid_segment
from msnb.templates.msnb_runtime.ray.ingress import version_app

if TYPE_CHECKING:
    from msnb.engines.ray.engine import LocalRay

# config.properties' models={...} keys, as model-config.yaml keys.
PER_MODEL_KEYS = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout")


@dataclass
class Entry:
    """A registered version of a model: its served folder, the archive's name in the store (``modelUrl``), how it
    was loaded, and the Serve application that serves it."""

    name: str
    version: str
    url: str
    folder: Path
    at_startup: bool
    app: str = ""
    running: bool = True  # its application deployed (False: registered with 0 workers, as TorchServe registers it)


class Registry:
    """The models a Ray engine serves, registered from ``config``'s model store as TorchServe registers them."""

    def __init__(self, engine: LocalRay, config: TsConfig, opener: Callable):
        """``opener(path, folder)``: an archive unpacked and checked into ``folder`` (``ModelFolder.open``)."""
        self.engine, self.config, self.opener = engine, config, opener
        self.served: dict[str, dict[str, Entry]] = {}  # name -> version -> entry, in registration order
        self.defaults: dict[str, str] = {}  # name -> its default version (the first registered, or set-default's)
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ reading
    @property
    def entries(self) -> dict[str, Entry]:
        """Each registered name's default version."""
        return {name: versions[self.defaults[name]] for name, versions in list(self.served.items())}

    def names(self) -> list[str]:
        return sorted(self.served)

    def entry(self, name: str, version: str | None = None) -> Entry:
        """The registered ``name`` at ``version`` (None: its default version; TorchServe's 404 otherwise)."""
        return self.versions(name, version)[0]

    def versions(self, name: str, version: str | None = None) -> list[Entry]:
        """``name``'s entry at ``version`` (None: the default), or every version's for ``all`` in TorchServe's order."""
        found = self.served.get(name)
        if found is None:
            raise RegistryError(404, "ModelNotFoundException", f"Model not found: {name}")
        if version == "all":
            return [found[v] for v in java_order(list(found))]
        version = version or self.defaults[name]
        if version not in found:
            raise RegistryError(
                404, "ModelVersionNotFoundException", f"Model version: {version} does not exist for model: {name}"
            )
        return [found[version]]

    def apps(self) -> dict[str, tuple[str, str]]:
        """Each serving application: (model name, version)."""
        served = [e for versions in list(self.served.values()) for e in versions.values() if e.running]
        return {e.app: (e.name, e.version) for e in served}

    # ------------------------------------------------------------------ register
    def archive(self, url: str, anywhere: bool = False) -> Path:
        """``url``'s archive, as TorchServe finds it (ts_refusals.archive_path)."""
        return archive_path(url, self.config.model_store, anywhere)

    def register(self, url: str, name: str | None = None, request: Any = None, at_startup: bool = False):
        """Open ``url`` from the store, write its settings (``request``: the register call's ts_params
        .RegisterRequest; None: a model loaded at start), deploy it unless it has 0 workers; the ModelStatus once it
        serves (not ``synchronous``: at once, its replicas started in the background)."""
        if name and not valid_segment(name):  # it names URLs and Serve applications (version_app)
            raise RegistryError(
                400, "BadRequestException", f"Model name {name!r} is not valid.", f"give model_name {SEGMENT_RULE}."
            )
        with self.lock:
            folder, version, requirements = self._opened(self.archive(url, at_startup), name)
            name = name or read_name(folder)
            app = version_app(name, version) if name in self.served else name
            entry = Entry(name, version, url, folder, at_startup, app, running=False)
            try:
                write_settings(folder, name, self._settings(folder, name, version, request))
                workers = read_settings(folder).get("minWorkers", 1)
                self.served.setdefault(name, {})[version] = entry
                self.defaults.setdefault(name, version)
                if workers <= 0:
                    self._tell_idle()
                    return ModelStatus(name, version, is_default=app == name, workers=())
                if request is not None and not request.synchronous:
                    self._tell_starting(entry.app, True)  # its predictions wait for its replicas, as on TorchServe
                    threading.Thread(target=self._deploy_later, args=(entry, requirements), daemon=True).start()
                    return None
                return self._deploy(entry, requirements)
            except BaseException:
                self._forget(entry)
                raise

    def _deploy(self, entry: Entry, requirements: list[str]) -> ModelStatus:
        """``entry``'s replicas started; a handler that does not load is TorchServe's 500 and the model unregistered
        (TorchServe's ``onError``)."""
        for _, outcome in self.engine.deploy_many([(entry.folder, {"requirements": requirements, "app": entry.app})]):
            if isinstance(outcome, MsnbError):
                self.engine.unregister(entry.app)  # its failed application (Serve keeps one that failed to deploy)
                with self.lock:
                    self._forget(entry)
                raise failed_workers(entry.name, entry.version, outcome)
        entry.running = True
        return replace(outcome, name=entry.name, is_default=entry.app == entry.name)

    def _deploy_later(self, entry: Entry, requirements: list[str]) -> None:
        """``_deploy`` of a register that did not wait (TorchServe's ``synchronous=false``), after which the router
        stops holding the model's predictions (they reach its replicas, or its 404 once a failed load unregistered
        it)."""
        try:
            self._deploy(entry, requirements)
        finally:
            self._tell_starting(entry.app, False)

    def _tell_starting(self, app: str, starting: bool) -> None:
        """The router told that ``app``'s replicas are starting (it holds its predictions until they answer, as
        TorchServe queues a prediction for a model whose workers start), or no longer; under the registry's lock (a
        deploy thread ends while another register starts)."""
        with self.lock:
            sets = self.engine.sets
            sets.starting = sets.starting | {app} if starting else sets.starting - {app}
            sets.tell_router()

    def _forget(self, entry: Entry) -> None:
        versions = self.served.get(entry.name, {})
        if versions.get(entry.version) is entry:
            del versions[entry.version]
            if not versions:
                self.served.pop(entry.name, None)
                self.defaults.pop(entry.name, None)
        shutil.rmtree(entry.folder, ignore_errors=True)

    def _opened(self, path: Path, name: str | None) -> tuple[Path, str, list[str]]:
        """The archive unpacked and checked beside the store, then moved to its folder unless its name is taken."""
        self.engine.store.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".register-", dir=self.engine.store.root))
        try:
            try:
                item = self.opener(path, staging)
            except MsnbError as err:
                raise RegistryError(
                    400,
                    "InvalidModelException",
                    f"Failed to open model archive {path.name}: {err.message}",
                    err.hint or "",
                ) from None
            name = name or item.name
            if item.version in self.served.get(name, {}):
                raise RegistryError(
                    409,
                    "ConflictStatusException",
                    f"Model version {item.version} is already registered for model {name}",
                )
            folder = self.engine.store.root / safe_name(name, item.version)
            os.replace(item.path, folder)
            install = self.config.flag("install_py_dep_per_model")  # else TorchServe installs nothing either
            return folder, item.version, list(item.requirements) if install else []
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _settings(self, folder: Path, name: str, version: str, request: Any) -> dict[str, int]:
        """What config.properties says of this model (default workers, models={...}) and the register call's
        ``request`` over it, as TorchServe's ``ModelManager.createModel`` weighs them: a batch size or delay given
        wins (0 and negative values too), the archive's responseTimeout wins over the one given."""
        own, out = read_settings(folder), {}
        if request is None and "minWorkers" not in own:  # 0: as many workers as CPUs, as TorchServe's getDefaultWorkers
            out["minWorkers"] = out["maxWorkers"] = self.config.number("default_workers_per_model") or os.cpu_count()
        given = NO_TIMEOUT if request is None else request.response_timeout
        if int(own.get("responseTimeout") or 0) <= 0:
            out["responseTimeout"] = self.config.number("default_response_timeout") if given == NO_TIMEOUT else given
        model = self.config.per_model().get(name, {})
        per = model.get(version) or next(iter(model.values()), {})
        out |= {k: int(per[k]) for k in PER_MODEL_KEYS if k in per}
        if request is not None:  # TorchServe's initial_workers sets both (measured: minWorkers = maxWorkers = it)
            out["minWorkers"] = out["maxWorkers"] = max(request.initial_workers, 0)
            if request.batch_size != NO_BATCH_SIZE:
                out["batchSize"] = request.batch_size
            if request.max_batch_delay != NO_BATCH_DELAY:
                out["maxBatchDelay"] = request.max_batch_delay
        if "minWorkers" in out:
            out["maxWorkers"] = max(out.get("maxWorkers", 0), out["minWorkers"])
        return out

    # ------------------------------------------------------------------ change
    def scale(self, name: str, version: str | None, low: int, high: int) -> ModelStatus:
        """TorchServe's ``min_worker`` / ``max_worker`` as the application's replicas (a rolling update of its size; the
        first deploy of a model registered with 0 workers, which stays registered when its handler does not load)."""
        with self.lock:
            entry = self.entry(name, version)
            workers = self.engine.status(entry.app).workers if entry.running else ()
            running = sum(w.status != "STOPPING" for w in workers)
            write_settings(entry.folder, name, {"minWorkers": low, "maxWorkers": max(high, low)})
            # to 0 workers: its predictions are TorchServe's 503 before its replicas go; from 0: they wait for the
            # replicas starting, as TorchServe queues them for its workers starting
            self._tell_idle()
            if low <= 0 and not entry.running:
                return ModelStatus(name, entry.version, is_default=entry.app == name, workers=())
            try:  # the replicas running now kept within min..max, as TorchServe keeps its workers
                status = self.engine.redeploy(entry.folder, app=entry.app, running=running)
            except MsnbError as err:
                if not entry.running:
                    self.engine.unregister(entry.app)  # its failed application (the folder is the entry's)
                raise failed_workers(name, version or "null", err) from None
            entry.running = True
            return status

    def idle(self) -> frozenset[str]:
        """The applications of the versions with no worker: registered with 0 workers, or scaled to 0 (a model whose
        replicas are starting has workers: TorchServe queues its predictions)."""
        from msnb.templates.msnb_runtime.handler.serving import ServingConfig
        from msnb.templates.msnb_runtime.ray.deployment import workers

        served = [e for versions in list(self.served.values()) for e in versions.values()]
        return frozenset(
            e.app for e in served if not workers(ServingConfig.from_model_config(read_settings(e.folder)))[1]
        )

    def _tell_idle(self) -> None:
        """The router told which applications have no worker (it answers their predictions with TorchServe's 503),
        when that changed."""
        idle, sets = self.idle(), self.engine.sets
        if idle != sets.idle:
            sets.idle = idle
            sets.tell_router()

    def set_default(self, name: str, version: str) -> Entry:
        """``version`` becomes what ``/predictions/NAME`` reaches: the application named after the model takes its
        folder and the old default moves to an application of its own (each started before the other stops: every
        version answers throughout)."""
        with self.lock:
            new, old = self.entry(name, version), self.entry(name)
            if new is old:
                return new
            self.engine.redeploy(old.folder, app=version_app(name, old.version))
            old.app = version_app(name, old.version)
            self.engine.redeploy(new.folder, app=name)
            self.engine.unregister(version_app(name, new.version))
            new.app, self.defaults[name] = name, new.version
            return new

    def unregister(self, name: str, version: str | None = None) -> Entry:
        """One version (None: the default one); the default version while others are served is TorchServe's 403."""
        with self.lock:
            entry = self.entry(name, version)
            versions = self.served[name]
            if entry.version == self.defaults[name] and len(versions) > 1:
                raise RegistryError(
                    403, "InvalidModelVersionException", f"Cannot remove default version for model {name}"
                )
            if entry.running:
                self.engine.unregister(entry.app)
            shutil.rmtree(entry.folder, ignore_errors=True)
            del versions[entry.version]
            if not versions:
                del self.served[name], self.defaults[name]
            self._tell_idle()
            return entry


def java_order(versions: list[str]) -> list[str]:
    """``versions`` in the order TorchServe lists a model's versions (``GET /models/NAME/all``): a Java
    ``ConcurrentHashMap``'s of 16 buckets (``String.hashCode``, spread), registration order within a bucket."""

    def bucket(text: str) -> int:
        code = 0
        for char in text:
            code = (31 * code + ord(char)) & 0xFFFFFFFF
        return (code ^ (code >> 16)) & 15

    return sorted(versions, key=bucket)  # stable: registration order within a bucket


def read_name(folder: Path) -> str:
    from msnb.engines.store import read_manifest

    return read_manifest(folder)[0]


def _config_path(folder: Path) -> Path:
    from msnb.templates.msnb_runtime.handler.names import CONFIG
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    manifest, _ = read_folder(folder)
    return folder / ((manifest.get("model") or {}).get("configFile") or CONFIG)


def read_settings(folder: Path) -> dict:
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    return read_folder(folder)[1]


def write_settings(folder: Path, name: str, settings: dict[str, int]) -> None:
    """``settings`` into the folder's model-config (the replicas' count and batching come from it) and ``name`` into
    its manifest (a register call's ``model_name``): the folder is the engine's own copy of the archive."""
    import json

    from msnb.templates.msnb_runtime.handler.names import MANIFEST

    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest["model"].get("modelName") != name:
        manifest["model"]["modelName"] = name
        (folder / MANIFEST).write_text(json.dumps(manifest))
    if settings:
        path = _config_path(folder)
        path.write_text(yaml.safe_dump({**read_settings(folder), **settings}, sort_keys=False))


__all__ = ["Entry", "Registry", "RegistryError", "write_settings"]
