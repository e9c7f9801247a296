"""A replica set: one Ray Serve deployment whose replicas each hold several TorchServe model folders, so that a model
store costs on Ray what it costs on TorchServe (one process that has imported torch, not one per model).

``ray.multi_model:models`` builds the application; its ``user_config`` lists the folders (``{"models": [{"app",
"model_dir", "name", "env", "envelope", "install", "key_file"}, ...]}``), so a folder added, replaced or removed reaches
the running replicas (``reconfigure``) without a restart: registering a model on a Ray whose set is up loads it into the
running process. A member with a ``key_file`` of its own opens with that inference key only (a set shared by several
processes on the shared Ray). Each folder is loaded by TorchServe's own loader (``LoadedModel``) in a namespace of its
own (ray.isolation: its modules, ``sys.path`` entry, cwd and variables while it loads and handles), and answered by a
``ModelSlot``: MsnbModel's ingress checks, batching (its own ``@serve.batch`` queues with its batchSize and
maxBatchDelay), responseTimeout, metrics labels and Context. A folder whose load fails fails alone: its requests get its
error, the others answer (``loaded`` tells the engine which failed). With ``max_num_models_per_replica`` in the
user_config, at most that many stay loaded in a replica (ray.residency): each member is loaded once when it joins (so a
folder that does not load is told at once), the least recently used idle one is evicted, and an evicted model's next
request waits for its load again. The router calls a set through multi_model_routes.SetHandle (the model's application
first); the local front sends ``/predictions/NAME`` to ``SET_ROUTE/predictions/NAME`` at a replica of the set.
Depends on ray[serve], starlette, pyyaml and the standard library, never on msnb.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from ..handler.serving import ServingConfig
from ..ts.checks import refused
from ..ts.model_loader import read_folder, requirements_of
from ..ts.wire import error_reply
from . import ingress
from . import runtime_env as needs
from .api import ApiRoutes, PerModelRoute
from .app import QUIET, LoadedModel, MsnbModel, json_reply, resolve
from .deployment import batch_settings, replicas, workers
from .isolation import Namespace
from .multi_model_routes import (
    LATENCY_METRIC,
    LOADED_PATH,
    MAX_LOADED,
    MODELS,
    REQUESTS_METRIC,
    strip_set_route,
    with_code_version,
)
from .replica import replica_gpu_id, worker_logs
from .residency import Residency, limit_of
from .streaming import WHOLE, StreamRoutes
from .timeout import response_timeout

logger = logging.getLogger("ray.serve")  # Serve's logger: its lines land in the replica's own log file


class Within:
    """A handler's entry point that runs inside its model's namespace (every ``handle`` call goes through it); its
    other attributes are the entry's own (a dev entry's ``current`` generation, the shared handler's ``streaming``)."""

    def __init__(self, entry: Any, space: Namespace):
        self.__wrapped__, self.space = entry, space

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.space.entered():
            return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)


class ModelSlot(MsnbModel.func_or_class):
    """One model folder of a replica set: MsnbModel's ingress checks, OpenAI routes, batching and responseTimeout, for it
    alone (Serve keeps one batch queue per decorated function, so each slot decorates its own)."""

    def __init__(
        self, app: str, model: LoadedModel, ingress_config: ingress.IngressConfig | None
    ):  # no super().__init__: it is loaded
        self.model, self.ingress_config = model, ingress_config
        size, wait_s = batch_settings(model.config)
        one = MsnbModel.func_or_class  # its batch methods' own bodies (``__wrapped__``: serve.batch keeps them)

        async def whole(requests: list) -> list:
            return await one._batch.__wrapped__(self, requests)

        async def streamed(requests: list):
            async for items in one._stream.__wrapped__(self, requests):
                yield items

        self._batch = serve.batch(max_batch_size=size, batch_wait_timeout_s=wait_s)(whole)
        self._stream = serve.batch(max_batch_size=size, batch_wait_timeout_s=wait_s)(streamed)
        self.timeout_s, self.stuck = response_timeout(model.config), ""
        self.routes, self.api = StreamRoutes(), ApiRoutes(PerModelRoute(self))
        self.app = app

    async def infer(self, explain: bool, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        began = time.perf_counter()
        try:
            return await super().infer(explain, body, headers)
        finally:
            counted(self.app, time.perf_counter() - began)

    async def infer_stream(self, body: bytes, headers: dict):
        began = time.perf_counter()
        try:
            async for item in super().infer_stream(body, headers):
                yield item
        finally:
            counted(self.app, time.perf_counter() - began)

    def close(self) -> None:
        """Stop its batch queues' tasks (each holds the slot, so an evicted model would stay in memory): called
        once no request of it is in flight."""
        for batched in (self._batch, self._stream):
            queue = getattr(getattr(batched.set_max_batch_size, "__self__", None), "_queue", None)
            task = getattr(queue, "_handle_batch_task", None)
            if task is not None:
                task.cancel()


_COUNTERS: dict[str, Any] = {}  # one of each per process (ray.serve.metrics)


def counted(app: str, seconds: float) -> None:
    """One request of member ``app`` and its time, counted (REQUESTS_METRIC, LATENCY_METRIC)."""
    if not _COUNTERS:
        from ray.serve import metrics

        for name in (REQUESTS_METRIC, LATENCY_METRIC):
            _COUNTERS[name] = metrics.Counter(name, description=f"msnb {name}", tag_keys=("model_name",))
    _COUNTERS[REQUESTS_METRIC].inc(1, tags={"model_name": app})
    _COUNTERS[LATENCY_METRIC].inc(seconds * 1000, tags={"model_name": app})


class Members:
    """A replica's model applications (``members``) and which of them are loaded (``slots``), at most
    ``residency.limit`` at once; ``load(app, spec)`` (MsnbModels': TorchServe's loader in a namespace) fills a slot
    or ``failed``."""

    def __init__(self) -> None:
        self.members: dict[str, dict] = {}  # model application -> what its slot loads from (loaded now or not)
        self.slots: dict[str, Any] = {}  # model application -> its slot (a ModelSlot), while it is loaded
        self.specs: dict[str, dict] = {}  # model application -> the folder it loaded from (evicted since or not)
        self.failed: dict[str, tuple[dict, str]] = {}  # model application -> what did not load, and why
        self.spaces: dict[str, Namespace] = {}
        self.residency = Residency()  # which slots stay loaded (user_config's MAX_LOADED)
        self.loads: Counter[str] = Counter()  # loads per model application (an eviction shows as one more)
        self._loading: dict[str, asyncio.Future] = {}  # a load under way: the requests that wait for it share it
        self._tasks: set[asyncio.Task] = set()

    def load(self, app: str, spec: dict) -> None:
        raise NotImplementedError

    async def reconfigure(self, config: dict) -> None:
        """Load what ``config["models"]`` adds or changes (one after another, off the event loop; the others' calls
        wait for each load, which holds the process's modules), unload what it leaves out, and keep at most
        ``config[MAX_LOADED]`` loaded."""
        self.residency.limit = limit_of((config or {}).get(MAX_LOADED))
        wanted = {str(spec["app"]): spec for spec in (config or {}).get("models") or []}
        for app in [a for a in {*self.members, *self.failed} if a not in wanted]:
            self.unload(app)
        self.members = wanted
        for app, spec in wanted.items():
            if spec not in (self.specs.get(app), self.failed.get(app, ({},))[0]):  # a failed one: not again
                await self._reload(app)  # (a request that asks for it meanwhile waits for this load)
        await self._evict()

    async def _load(self, app: str, spec: dict) -> None:
        await asyncio.to_thread(self.load, app, spec)
        if self.specs.get(app) is spec:
            self.residency.loaded(app)
            self.loads[app] += 1
        await self._evict()

    async def _evict(self) -> None:
        """Unload the idle models beyond the limit, least recently used first (ray.residency): each victim chosen
        and taken out at once (a request may begin for another one while a namespace closes)."""
        while victims := self.residency.victims():
            app = victims[0]
            slot, space = self.slots.pop(app, None), self.spaces.pop(app, None)
            self.residency.forget(app)
            logger.info(
                "%s evicted from this replica (%s %s): its next request loads it again",
                app,
                MAX_LOADED,
                self.residency.limit,
            )
            if slot is not None:
                slot.close()
            if space is not None:
                await asyncio.to_thread(space.close)

    def unload(self, app: str) -> None:
        slot = self.slots.pop(app, None)
        if slot is not None and not self.residency.busy(app):
            slot.close()
        self.residency.forget(app)
        for table in (self.members, self.specs, self.failed):
            table.pop(app, None)
        space = self.spaces.pop(app, None)
        if space is not None:
            space.close()

    @contextlib.asynccontextmanager
    async def using(self, app: str) -> AsyncIterator[ModelSlot | None]:
        """Model ``app``'s slot for one request, loaded first when it was evicted (the request waits for that load),
        and kept loaded until the request ends; None: this replica does not serve it (``missing`` says why)."""
        self.residency.begin(app)  # first: a load under way elsewhere must not evict it before it is used
        try:
            if app not in self.slots and app in self.members and app not in self.failed:
                await self._reload(app)
            yield self.slots.get(app)
        finally:
            self.residency.end(app)
            if self.residency.victims():
                task = asyncio.ensure_future(self._evict())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _reload(self, app: str) -> None:
        """Load member ``app`` (it joined, changed, or was evicted); the requests that ask meanwhile wait for the
        same load."""
        pending = self._loading.get(app)
        if pending is None:
            pending = self._loading[app] = asyncio.ensure_future(self._load(app, self.members[app]))
            pending.add_done_callback(lambda _: self._loading.pop(app, None))
        await asyncio.shield(pending)

    def loaded(self) -> dict[str, dict]:
        """Each model application's last load: its ``model_dir`` and ``error`` (None: it serves that folder),
        whether it is ``resident`` (loaded now) and how many ``loads`` this replica made of it."""
        served = {app: {"model_dir": spec["model_dir"], "error": None} for app, spec in self.specs.items()}
        failed = {app: {"model_dir": spec["model_dir"], "error": why} for app, (spec, why) in self.failed.items()}
        return {
            app: {**entry, "resident": app in self.slots, "loads": self.loads[app]}
            for app, entry in (served | failed).items()
        }

    def missing(self, app: str) -> tuple[int, dict, bytes]:
        """The answer for a model this replica does not serve: its load error, else TorchServe's 404."""
        if app in self.failed:
            said = self.failed[app][1].strip().splitlines()[-1]
            return error_reply(503, "ServiceUnavailableException", f"{app} did not load: {said}")
        return error_reply(404, "ModelNotFoundException", f"Model not found: {app.partition('@')[0]}")


@serve.deployment(name=MODELS, logging_config=QUIET)
class MsnbModels(Members):
    """A replica holding the model folders its ``user_config`` lists, each in a slot of its own while it is loaded
    (``ingress_config``: the router's args, when the local front sends predictions straight here)."""

    def __init__(self, ingress_config: dict | None = None):
        import ray

        super().__init__()
        worker_logs()
        preload()
        self.gpu_id = replica_gpu_id(ray.get_gpu_ids())
        self.ingress_args = ingress_config
        self.ingress_config = ingress.IngressConfig(ingress_config) if ingress_config is not None else None

    def load(self, app: str, spec: dict) -> None:
        """Load one folder in a namespace of its own; a failure is kept as its answer (a slot serving an older
        folder of the same application keeps serving)."""
        folder = resolve(str(spec["model_dir"]))
        try:
            space = Namespace(folder, spec.get("env"), installed(folder, spec.get("install") or []))
            with space.entered():
                model = LoadedModel(folder, spec.get("name"), self.gpu_id, envelope=spec.get("envelope"))
        except Exception as err:
            self.failed[app] = (spec, "".join(traceback.format_exception(err)))
            logger.error("%s did not load in this replica set (the others serve on):\n%s", app, self.failed[app][1])
            return
        model.entry = Within(model.entry, space)
        old = self.spaces.get(app)
        self.slots[app], self.spaces[app], self.specs[app] = ModelSlot(app, model, self.checks(spec)), space, spec
        self.failed.pop(app, None)
        if old is not None:
            old.close()

    def checks(self, spec: dict) -> ingress.IngressConfig | None:
        """The ingress checks of a member's requests: the set's, with the member's own inference key when its entry
        names a ``key_file`` (a set shared by several processes, each opening only its own models with its key)."""
        if self.ingress_args is None or not spec.get("key_file"):
            return self.ingress_config
        return ingress.IngressConfig({**self.ingress_args, "key_file": spec["key_file"]})

    def check_health(self) -> None:
        for slot in list(self.slots.values()):  # a stuck model asks for a new replica (ray.timeout)
            slot.check_health()

    async def __call__(self, request: Request) -> Response:
        """A prediction the local front sent to this set (``SET_ROUTE/predictions/NAME...``): its model's ingress checks."""
        path = strip_set_route(request.url.path)
        parts = [p for p in path.split("/") if p]
        if path == LOADED_PATH and self.ingress_config is not None:  # the local engine asks, with the key
            refusal = refused(ingress.lower(request.headers), self.ingress_config.key)
            return ingress.reply(*(error_reply(*refusal) if refusal else json_reply(200, self.loaded())))
        if parts[:1] != ["predictions"] or len(parts) < 2:
            return ingress.not_found()
        versioned = ingress.version_app(*parts[1:3]) if len(parts) > 2 else ""
        app = versioned if versioned in self.members else parts[1]
        async with self.using(app) as slot:
            if slot is None:
                return ingress.reply(*self.missing(app))
            return await slot(Request({**request.scope, "path": path}, request.receive))

    async def infer(self, app: str, explain: bool, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        async with self.using(app) as slot:
            return await slot.infer(explain, body, headers) if slot else self.missing(app)

    async def infer_stream(self, app: str, body: bytes, headers: dict):
        async with self.using(app) as slot:
            if slot is None:
                yield (WHOLE, *self.missing(app))
                return
            async for item in slot.infer_stream(body, headers):
                yield item

    async def describe(self, app: str, customized: bool, headers: dict) -> tuple[int, dict, bytes]:
        async with self.using(app) as slot:
            return await slot.describe(customized, headers) if slot else self.missing(app)

    async def streams(self, app: str, card: bool = False) -> bool | dict:
        async with self.using(app) as slot:
            if slot is not None:
                return slot.streams(card)
        if app in self.failed and not card:
            return False  # answered whole: with its load error
        raise LookupError(f"no model {app} in this replica set")


PRELOADED = ("torch", "ts.model_loader", "ts.torch_handler.base_handler")


def preload() -> None:
    """Import what a TorchServe model's load imports first (torch, TorchServe's loader and base handler) as the
    replica starts: a model that joins a running replica later (the shared Ray's standing set) pays only its own
    load. What is not installed is left to the load that needs it."""
    for module in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def installed(folder: Any, requirements: list[str]) -> tuple:
    """Where this node installed what it lacks of a model's requirements (runtime_env.install_once), as one more
    root of the model's namespace rather than an entry of every model's ``sys.path``."""
    import sys

    target = needs.install_once(folder, requirements)
    if target is None:
        return ()
    sys.path.remove(str(target))
    return (target,)


def member(spec: dict, args: dict) -> dict:
    """A set member's entry in the user_config: what its slot loads (``install``: what the node lacks of its
    requirements, unless the set's ``install_requirements`` is false)."""
    # version: a new export's, reloaded in place; key_file: the member's own inference key (MsnbModels.checks)
    keys = ("app", "model_dir", "name", "env", "envelope", "version", "key_file")
    entry = {k: spec[k] for k in keys if spec.get(k) is not None}
    entry.setdefault("app", spec.get("name") or str(spec["model_dir"]))
    if str(args.get("install_requirements", True)).lower() != "false":
        entry["install"] = needs.missing(requirements_of(resolve(str(spec["model_dir"]))))
    return entry


def models(args: dict) -> Any:
    """Application builder for a replica set: ``args`` = models (each: model_dir, and optionally app, name, env,
    envelope, version, key_file), MAX_LOADED (at most that many loaded in a replica; absent or 0: all), and as
    ray.app:model takes them num_cpus, num_gpus, memory, check_resources, install_requirements, max_replicas_per_node,
    max_surge_percent, running and ingress_config. Its replicas are as many as its members' workers ask for (the most
    any asks; a range starts from ``running`` when given); the set is refused when no node can hold a replica
    (ray.runtime_env)."""
    specs = [member(spec, args) for spec in args.get("models") or []]
    configs = [read_folder(resolve(str(spec["model_dir"])))[1] for spec in specs]
    options = set_options(configs, args) | {"user_config": {"models": specs, MAX_LOADED: args.get(MAX_LOADED)}}
    if str(args.get("check_resources", True)).lower() != "false":
        needs.check(str(args.get("name") or "replica set"), options)
    for key in ("max_replicas_per_node", "max_surge_percent"):
        if args.get(key) is not None:
            options[key] = int(args[key])
    return MsnbModels.options(**with_code_version(options, args.get("ingress_config"))).bind(args.get("ingress_config"))


def set_options(configs: list[dict], args: dict) -> dict[str, Any]:
    """A replica set's deployment options from its members' model-configs (``configs``) and the set's ``args``
    (``models``' own): as many replicas as its members' workers ask for (the most any asks; a range starts from
    ``running`` when given), a queue that holds every member's batch, each replica sized by num_cpus, num_gpus and
    memory. (`msnb export --ray` prints what a set needs from these.)"""
    low, high = max((workers(ServingConfig.from_model_config(c)) for c in configs), default=(1, 1))
    batch = sum(batch_settings(c)[0] for c in configs) or 1
    actor = needs.sized({"num_cpus": float(args.get("num_cpus", 1.0))}, args)
    options: dict[str, Any] = {
        "ray_actor_options": actor,
        "max_ongoing_requests": max(16, 2 * batch),
        "max_constructor_retry_count": 1,
    }
    return options | replicas(low, high, batch, args.get("running"))
