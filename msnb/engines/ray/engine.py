"""A local Ray Serve owned by this process: the notebook's second engine (``%ms_serve NAME --engine ray``).

It is the Engine protocol (msnb.engines.protocol) over Ray Serve, as ``LocalServer`` is over TorchServe. Ray runs
on loopback in a private temp dir (no dashboard, no usage stats) with Ray's token authentication on; msnb's ingress
(msnb.engines.ray.ingress) holds the one port and sends each prediction straight to a replica of its model, and the
router and every replica ask each request for the session's inference key (``key_file``, TorchServe's format);
``stop()``, interpreter exit and, when this process is killed, msnb's watchdog (and the ingress itself, when its
owner's pipe closes) leave no process and no file behind.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msnb.engines import watchdog
from msnb.engines.auth import Keys, write_key_file
from msnb.engines.inference_api import InferenceClient
from msnb.engines.model_metrics import ModelMetrics, per_model
from msnb.engines.models import ModelStatus, WorkerStatus
from msnb.engines.protocol import local_url, mcp_url, openai_url
from msnb.engines.ray import ENGINE, ROUTER_APP, require
from msnb.engines.ray.metrics import nodes_metrics
from msnb.engines.ray.nodes import (
    LOOPBACK,
    free_port,
    node_args,
    quiet_serve_log,
    refuse_taken,
    shutdown,
    started,
    use_token,
)
from msnb.engines.ray.packing import DEFAULT_MODELS_PER_REPLICA, Packing, own_route
from msnb.engines.ray.replica_sets import ReplicaSets
from msnb.engines.store import STORE_DIR, ModelStore, read_manifest
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.api import hosts
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES, ServingConfig
from msnb.templates.msnb_runtime.ray.management import TS_STATE

TEMP_PREFIX = "msnbray-"  # short: Ray's Unix sockets live under it (107 bytes at most)
PORT_OPTION = "msnb.serve(name, engine='ray', port=P) or %ms_serve NAME --engine ray --port P"
INGRESS_LOG = "ingress.log"  # what the ingress (msnb.engines.ray.ingress) says when it cannot start
KEY_FILE = "key_file.json"  # the inference key the router asks for, in TorchServe's format (mode 0600)
# Ray's CPUs are logical: they decide where a replica may start, not how much it may run. The kernel's Ray has 2;
# at 0.1 each it starts 20 replicas, and a deploy beyond that is refused at once (``_refuse_unschedulable``):
# Serve would wait forever for a replica it cannot place.
REPLICA_CPUS = 0.1
ROUTER_WAIT_S = 300.0  # the router's replica is one Python process starting: minutes on a loaded machine


class LocalRay:
    """A one-node Ray with Serve behind msnb's ingress on ``host:http_port`` (a free port when None; ``host``: loopback
    unless config.properties' inference_address names another, with the key on: ts_properties.check_addresses)."""

    def __init__(
        self,
        http_port: int | None = None,
        num_cpus: float = 2,
        replica_cpus: float = REPLICA_CPUS,
        max_request_size: int | None = None,
        host: str = LOOPBACK,
        models_per_replica: int = DEFAULT_MODELS_PER_REPLICA,
        own_replica: tuple[str, ...] = (),
        loaded_per_replica: int | None = None,
    ):
        self.http_port, self.num_cpus, self.replica_cpus, self.host = http_port, num_cpus, replica_cpus, host
        self.allowed_hosts = ""  # config.properties' allowed_hosts
        self.max_request_size = max_request_size or DEFAULT_MAX_BYTES  # the router's 413 above it
        self._requested_port = http_port  # None: a free port at each start
        self.root: Path | None = None
        self.store = ModelStore(Path(tempfile.gettempdir()) / "msnb-ray-unstarted")
        self.client = None
        self._cluster = self._watchdog = self._ingress = None
        self._router_up = False
        self._folders: dict[str, Path] = {}  # name -> the folder its replicas serve
        self._env: dict[str, dict[str, str]] = {}  # name -> the variables its replicas get (--env)
        # models that share replicas (msnb.engines.ray.packing: the rule, K in a set, L loaded in a replica)
        self.sets = ReplicaSets(self, Packing(models_per_replica, own_replica, loaded_per_replica), load_error)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LocalRay":
        with self._lock:
            if self.running:
                return self
            require()
            port = self.http_port or free_port()
            refuse_taken(port, PORT_OPTION, self.host)
            self.root = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir="/tmp"))
            try:
                self._start(port)
            except BaseException:
                self.stop()
                raise
            return self

    def _start(self, port: int) -> None:
        import ray  # (imported by require() first, with msnb's Ray environment)
        from ray import serve
        from ray.cluster_utils import Cluster

        from msnb.engines.ray import ingress  # uvloop and httptools come with Ray Serve: imported once used, like ray
        from msnb.templates.msnb_runtime.ray import app as ray_app

        quiet_serve_log()
        proxy_port = free_port()  # Serve's HTTP proxy: the ingress's way in while a route has no replica running
        write_key_file(self.key_file)
        # The ingress needs only the key and its ports: its Python starts while Ray's nodes do (waited for below).
        log, limit = self.root / INGRESS_LOG, self.max_request_size
        self._ingress = ingress.launch(port, proxy_port, limit, self.key_file, log, self.host, self.allowed_hosts)
        with started(self.root):
            self._cluster = Cluster(initialize_head=True, head_node_args=node_args(self.root, self.num_cpus, True))
        # this process killed: the GCS, every process Ray started for this root (its agents too) and its files go
        self._watchdog = watchdog.spawn(self.pid, self.root, ("RAY_TMPDIR", str(self.root)))
        ray.init(address=self._cluster.address, log_to_driver=False, logging_level="WARNING")
        serve.start(http_options={"host": LOOPBACK, "port": proxy_port}, logging_config=ray_app.QUIET)
        # Not waited for here: its replica starts while the first model's does (see _router_running).
        serve.run_many(
            [serve.RunTarget(ray_app.router(self._ingress_config()), name=ROUTER_APP, route_prefix="/")],
            wait_for_ingress_deployment_creation=False,
            wait_for_applications_running=False,
        )
        self._router_up = False
        ingress.ready(self._ingress, port, self.root / INGRESS_LOG, 60, self.host)
        self.http_port, self.store = port, ModelStore(self.root / STORE_DIR)
        self.client = InferenceClient(self.inference_url, keys=Keys(self.key_file, None))
        _LIVE.add(self)

    def stop(self) -> None:
        """Shut Serve and Ray down, then delete the temp dir; safe to call twice."""
        with self._lock:
            _LIVE.discard(self)
            if self._ingress is not None:
                from msnb.engines.ray import ingress

                ingress.stop(self._ingress)
            if self._cluster is not None:
                shutdown(self._cluster)
                use_token(None)  # this process's Ray environment as it was before start()
            if self._watchdog is not None:
                self._watchdog.stdin.close()  # the watchdog finds nothing left and deletes the temp dir
                self._watchdog.wait(30)
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self._cluster = self._watchdog = self._ingress = self.root = self.client = None
            self.http_port = self._requested_port
            self._folders.clear()
            self._env.clear()
            self.sets.packing.clear()

    @property
    def running(self) -> bool:
        pid = self.pid
        return pid is not None and bool(watchdog.process_tree(pid))

    @property
    def pid(self) -> int | None:
        """The GCS server's pid: a new Ray is a new pid (the session's "served by" check)."""
        if self._cluster is None:
            return None
        procs = self._cluster.head_node.all_processes.get("gcs_server") or []
        return procs[0].process.pid if procs else None

    @property
    def workdir(self) -> Path | None:
        return self.root

    @property
    def key_file(self) -> Path | None:
        """The session's inference key (TorchServe's key_file.json format: ``msnb predict --token-file``)."""
        return self.root / KEY_FILE if self.root else None

    def log_tail(self, lines: int = 40) -> str:
        """The newest lines of every replica's log (what a failing load or request wrote): a set's once."""
        apps = dict.fromkeys(self.sets.status_app(name) or name for name in self._folders)
        return "\n".join(line for app in apps for line in self.app_log(app, lines))[-20000:]

    @property
    def metrics_port(self) -> int | None:
        """The head node's Prometheus port: Ray's and Serve's metrics, and the handlers' own (``context.metrics``)."""
        return self._cluster.head_node.metrics_export_port if self._cluster else None

    @property
    def inference_url(self) -> str:
        return local_url(self.host, self.http_port)

    def metrics(self) -> dict[str, ModelMetrics]:
        """Model name -> what its replicas counted, on every node (msnb.engines.ray.metrics); {} before Ray runs."""
        apps = {app: read_manifest(folder) for app, folder in self._folders.items()}
        return per_model(nodes_metrics(apps)) if self._cluster else {}

    @property
    def openai_base_url(self) -> str:
        """OpenAI's API over the streaming and embedding models, answered by the router (templates/msnb_runtime/ray/api.py)."""
        return openai_url(self.inference_url)

    @property
    def mcp_url(self) -> str:
        """MCP's streamable HTTP endpoint: every served model is a tool."""
        return mcp_url(self.inference_url)

    @property
    def log_dir(self) -> Path:
        return Path(self._cluster.head_node.get_logs_dir_path()) if self._cluster else Path(tempfile.gettempdir())

    # ------------------------------------------------------------------ models
    def redeploy(self, path: str | Path, app: str | None = None, **params: Any) -> ModelStatus:
        """Serve the model folder ``path`` as its application (``app``: the model's name, or another version's
        application: msnb_runtime.ray.ingress.version_app; ``params``: more of ray.app.model's args): the first time a
        deploy, later a rolling update (Serve starts the new replicas before it drains the old ones: no request is lost)."""
        from ray import serve

        from msnb.templates.msnb_runtime.ray import app as ray_app

        folder = Path(path)
        name = read_manifest(folder)[0]
        app = app or name
        if self.sets.status_app(app) is not None:  # a packed model: its set's replicas load the new folder in place
            return self.sets.replace(folder, app, params.get("running"))
        self._refuse_unschedulable(app, folder)
        args = self._model_args(folder, name) | params
        try:
            serve.run(ray_app.model(args), name=app, route_prefix=own_route(folder, app))
        except Exception as err:  # Serve's RuntimeError names the deployment, not the cause
            raise load_error(app, f"{err}\n{_deployment_message(app)}") from None
        states = self.sets.wait_started(app, folder)  # serve.run's RUNNING: before a scale's replicas run
        self._router_running()
        self.routes_changed()
        previous, self._folders[app] = self._folders.get(app), folder
        self._drop_unserved(previous)
        return self._status(app, states)

    def routes_changed(self) -> None:
        """The front reads the routes again now: a call returns once the next prediction takes the routes it left."""
        if self._ingress is not None:
            from msnb.engines.ray import ingress

            ingress.refresh(self._ingress)

    def _drop_unserved(self, folder: Path | None) -> None:
        """``folder`` deleted unless an application still serves it (two versions' may swap folders)."""
        if folder is not None and folder not in self._folders.values():
            shutil.rmtree(folder, ignore_errors=True)

    def _model_args(self, folder: Path, name: str) -> dict[str, Any]:
        # env_vars: the replicas' constructor sets them (ray_app.model), no file holds them
        return {
            "model_dir": str(folder),
            "name": name,
            "install_requirements": False,
            "num_cpus": self.replica_cpus,
            "max_surge_percent": 100,  # one replica: its replacement starts before it stops
            "env_vars": self._env.get(name, {}),
            "ingress_config": self._ingress_config(),
        }

    def _ingress_config(self) -> dict[str, Any]:
        """What the router and the replicas answering predictions ask of each request (``key_hint``: shared Ray)."""
        config = {"key_file": str(self.key_file), "max_request_size": self.max_request_size, "host": self.host}
        config[hosts.ARGS_KEY] = self.allowed_hosts  # the names it answers besides loopback's (api.hosts)
        if hint := self.key_hint():  # where the key that opens a model is, said with a refused key
            config["key_hint"] = hint
        return config if self.auth else {**config, "auth": False}

    def key_hint(self) -> str | None:
        """Where the key that opens this Ray's models is, beyond the session's own key file (None: only there)."""
        return None

    def deploy_many(self, models: list[tuple[Path, dict]], timeout_s: float = ROUTER_WAIT_S) -> Iterator[tuple]:
        """Serve new model folders side by side (``models``: each folder and more builder args, e.g. its
        ``requirements``, ``envelope``, ``app``: see ``redeploy``), in one Serve call so that their replicas start at
        once: each in a replica set with others (msnb.engines.ray.packing's rule: a set's running replicas load it in
        place) or in an application of its own; yields ``(name, ModelStatus)`` as each runs, ``(name, ServerError)``
        as each fails (deleted: the rest serve on)."""
        from ray import serve

        targets, pending, joined = [], {}, {}
        for app, outcome in self.sets.plan(models):
            if isinstance(outcome, ServerError):
                yield app, outcome
            elif isinstance(outcome, tuple):  # (folder, its own application's RunTarget)
                pending[app] = outcome[0]
                targets.append(outcome[1])
            else:
                joined[app] = outcome
        targets += self.sets.set_targets(joined)
        if targets:
            unique = list({t.name: t for t in targets}.values())  # one target per set, as its members are now
            serve.run_many(unique, wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
            self._router_running()
        yield from self._settled(pending, timeout_s)
        yield from self.sets.settle(joined, timeout_s) if joined else ()

    def _settled(self, pending: dict[str, Path], timeout_s: float) -> Iterator[tuple]:
        """Each pending application once it runs or has failed (or is still not running after ``timeout_s``)."""
        from ray import serve

        deadline = time.monotonic() + timeout_s
        while pending:
            apps = serve.status().applications
            for name in list(pending):
                app = apps.get(name)
                state = app.status if app is not None else "NOT_STARTED"
                if state == "RUNNING":
                    self._folders[name] = pending.pop(name)
                    self.routes_changed()
                    yield name, self.status(name)
                elif state == "DEPLOY_FAILED" or time.monotonic() > deadline:
                    text = f"{app.message if app else 'not started'}\n{_deployment_message(name)}"
                    error = load_error(name, "\n".join([text, *self.model_log(name, 30)]))
                    serve.delete(name, _blocking=False)
                    shutil.rmtree(pending.pop(name), ignore_errors=True)
                    yield name, error
            time.sleep(0.1 if pending else 0)

    register = redeploy

    def model_env(self, name: str, values: dict[str, str]) -> None:
        """Give the replicas ``name`` deploys from now on these variables (set by each replica's constructor before
        the folder loads), and no other model's."""
        self._env[name] = dict(values)

    def unregister(self, name: str, version: str | None = None) -> None:
        """Delete the application ``name`` (its replicas and its folder), as ``LocalServer.unregister`` does; Ray
        serves one version per application (another version is an application of its own: model_registry), so
        ``version`` is accepted for the same call and changes nothing."""
        from ray import serve

        if self.sets.status_app(name) is not None:  # a packed model: the router first, then its set unloads it
            self.sets.leave(name)
        else:
            serve.delete(name)  # waits until its replicas are gone; a name never deployed is a no-op
        self.routes_changed()
        self._env.pop(name, None)
        self._drop_unserved(self._folders.pop(name, None))

    def _refuse_unschedulable(self, name: str, folder: Path, free: float | None = None) -> float:
        """The logical CPUs the replicas of ``folder`` need; a ServerError, before anything is deployed, when they do
        not fit in the ``free`` ones (default: those Ray has free now; a redeploy's new replicas start before the
        old ones stop, so they need room too)."""
        import ray

        from msnb.templates.msnb_runtime.ray.app import read_folder
        from msnb.templates.msnb_runtime.ray.deployment import workers

        replicas = workers(ServingConfig.from_model_config(read_folder(folder)[1]))[0]
        need = replicas * self.replica_cpus
        free = ray.available_resources().get("CPU", 0.0) if free is None else free
        if need <= free + 1e-9:
            return need
        served = ", ".join(self._folders) or "none"
        raise ServerError(
            f"{name} cannot start on the kernel's Ray: its {replicas} replica(s) need {need:g} of its "
            f"{self.num_cpus:g} logical CPUs and {free:g} are free (served: {served}).",
            f"each replica holds {self.replica_cpus:g} CPU, or Ray Serve would wait forever for one it cannot "
            "place: serve it with fewer workers (--workers), or %ms_stop and serve only the models you need.",
        )

    def _router_running(self, timeout_s: float = ROUTER_WAIT_S) -> None:
        """Wait (once per start) until the router application runs: deployed at start without waiting, so that its
        replica and the first model's start at the same time."""
        from ray import serve

        deadline = time.monotonic() + timeout_s
        while not self._router_up:
            app = serve.status().applications.get(ROUTER_APP)
            self._router_up = app is not None and app.status == "RUNNING"
            if not self._router_up and (time.monotonic() > deadline or (app and app.status == "DEPLOY_FAILED")):
                raise ServerError(
                    f"Ray Serve's router did not start: {app and app.message}",
                    "stop and serve again (%ms_stop); the Ray logs are in server.log_dir.",
                )
            time.sleep(0 if self._router_up else 0.1)

    def free_version(self, name: str, version: str) -> str:
        """``version``, or ``version-rN`` when ``name`` already serves it: each deploy is a new folder, so Serve
        sees a changed application and rolls it out."""
        served = {read_manifest(f)[1] for n, f in self._folders.items() if n == name}
        candidate, n = version, 1
        while candidate in served:
            n += 1
            candidate = f"{version}-r{n}"
        return candidate

    def models(self) -> list[ModelStatus]:
        return [self.status(name) for name in self._folders]

    def status(self, name: str, version: str | None = None) -> ModelStatus:
        return self._status(name, self.sets.replica_states(name))

    def _status(self, name: str, states: dict[str, int]) -> ModelStatus:
        workers = tuple(
            WorkerStatus(f"{state}-{i}", TS_STATE.get(state, state)) for state, n in states.items() for i in range(n)
        )
        folder = self._folders.get(name)
        return ModelStatus(name, read_manifest(folder)[1] if folder else "", True, workers, self.inference_url)

    def describe(self, name: str) -> tuple[int, bytes]:
        """TorchServe's ``GET /models/NAME?customized=true``, which the router answers on the inference URL."""
        resp = self.client.call("GET", f"{self.inference_url}/models/{name}?customized=true", "inference")
        return resp.status_code, resp.content

    def predict(self, name: str, data: Any, **kwargs: Any) -> Any:
        return self.client.predict(name, data, **kwargs)

    def predict_stream(self, name: str, data: Any, **kwargs: Any) -> Iterator[Any]:
        """The answer's chunks as they arrive (see InferenceClient.predict_stream)."""
        return self.client.predict_stream(name, data, **kwargs)

    def explain(self, name: str, data: Any, **kwargs: Any) -> Any:
        return self.client.explain(name, data, **kwargs)

    # ------------------------------------------------------------------ the rest of the Engine protocol
    kind, label = ENGINE.kind, ENGINE.label  # declared once, in the package (msnb.engines.registry lists it)
    management_url = metrics_url = None  # TorchServe's: none of its own (the start options', ts_start, where taken)
    auth = True  # False: the router and the replicas answer without the inference key (disable_token_authorization)
    python = None  # the replicas run this interpreter (the kernel's packages)

    def versions(self, name: str) -> list[ModelStatus]:
        return [self.status(name)] if name in self._folders else []

    def progress_detail(self, name: str) -> Callable[[], str]:
        return lambda: "waiting for a replica"  # replicas log per replica: no worker log to follow

    def model_log(self, name: str, lines: int = 40) -> list[str]:
        """The newest lines the replicas of ``name`` wrote (Serve's replica logs of that application)."""
        return self.app_log(self.sets.status_app(name) or name, lines)  # a packed model's: its set's

    def app_log(self, app: str, lines: int = 40) -> list[str]:
        found: list[str] = []
        for log in sorted(self.log_dir.glob(f"serve/replica_{app}_*.log")):
            found += log.read_text(errors="replace").splitlines()
        return found[-lines:]


_LIVE: set[LocalRay] = set()


def _deployment_message(name: str) -> str:
    """The replica's constructor traceback, which Serve keeps in the deployment's status message."""
    from ray import serve

    try:
        app = serve.status().applications.get(name)
        return "\n".join(d.message for d in app.deployments.values() if d.message) if app else ""
    except Exception:  # the status is a detail of the error being raised
        return ""


def load_error(name: str, text: str) -> ServerError:
    """A replica that did not load: the handler's own message and hint out of Serve's status text."""
    found = re.search(r"HandlerLoadError: (.*?)\nHint: (.*?)(?:\n|$)", text, re.S)
    if found:
        return ServerError(
            f"{name} did not load on Ray: {found.group(1).strip()}", found.group(2).strip(), text[-2000:]
        )
    return ServerError(f"{name} did not load on Ray.", "read the replica's traceback below.", text[-3000:])


_default: LocalRay | None = None


def default_ray(port: int | None = None, shared: Callable[[], LocalRay | None] | None = None) -> LocalRay:
    """The process-wide local Ray of the notebook surfaces (not started here); when one is made and no port is asked
    for, ``shared()`` first (the shared Ray of `msnb ray up`, or None when it is not up)."""
    global _default
    if _default is None or (port is not None and port != _default.http_port and not _default.running):
        _default = (shared() if shared and port is None else None) or LocalRay(port)
    return _default


def default_made() -> LocalRay | None:
    """The process-wide local Ray if one was made (running or not), without making one."""
    return _default


def default_running() -> bool:
    """Whether the process-wide local Ray runs now (without making one)."""
    return _default is not None and _default.running


@atexit.register
def _stop_all() -> None:
    for engine in list(_LIVE):
        try:
            engine.stop()
        except Exception:  # best effort at exit; the watchdog is the backstop
            pass


__all__ = ["LocalRay", "default_made", "default_ray", "default_running", "load_error"]
