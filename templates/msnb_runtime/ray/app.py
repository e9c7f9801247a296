"""A Ray Serve deployment that serves an msnb model folder as a TorchServe worker does, at TorchServe's URLs.

One application per model folder (``msnb_runtime.ray.app:model``, args ``{"model_dir": "NAME"}``) and one router
(``msnb_runtime.ray.app:router``) at ``/`` that answers ``POST /predictions/NAME``, ``POST /explanations/NAME`` and
TorchServe's management reads ``GET /models`` and ``GET /models/NAME[?customized=true]`` (ray.management). The
replica loads the folder like a worker (folder as cwd and on ``sys.path``, the manifest's handler,
``handle(None, context)`` once) and runs ``handle`` once per ``@serve.batch`` batch with a TorchServe
``Context``. Deployment options come from the folder's model-config.yaml (see ``deployment_options``).
Depends on ray[serve], starlette, pyyaml and the standard library, never on msnb.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from ray import exceptions as ray_errors
from ray import serve
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError
from starlette.requests import Request
from starlette.responses import Response

from ..handler.names import HANDLER_MODULE
from ..ts import wire
from ..ts.checks import refused
from ..ts.context import ChunkSocket, set_requests
from ..ts.model_loader import enter, load_handler, read_folder, requirements_of, sends_intermediate
from ..ts.wire import JSON_TYPE, error_reply

# By package, never by trying: the notebook's engine imports msnb.templates.msnb_runtime.ray.app, whose classes Ray
# pickles by module name, so a top-level msnb_runtime that happens to be importable in the kernel (an exported folder
# on sys.path) must not be picked, or every replica fails with "No module named 'msnb_runtime'": relative imports only.
from . import ingress, management, runtime_env, token_interceptor
from .api import ApiRoutes, PerModelRoute, model_card
from .deployment import batch_settings, deployment_options
from .ingress import reply
from .management import metadata
from .multi_model_routes import SetHandle, SetRouting, members_of, model_states, set_targets, with_code_version
from .replica import RayMetrics, replica_gpu_id, worker_logs
from .streaming import StreamRoutes, answer_whole, locked, relay, stream_batch, streams
from .timeout import bounded, response_timeout, timed_out, wait_while

token_interceptor.bind_replica_grpc()  # imported in every replica before Serve binds its inter-deployment gRPC server

REPLICA_TRIES = 3  # a call whose replica was lost (its node gone) is sent again, to another replica
STARTING_WAIT_S = 120.0  # the longest a prediction waits for the replicas of a model registered without waiting
# What a call gets when its replica's process or node went: the actor dead or unreachable, the worker or node
# gone, its answer lost with it. Never the model's own errors: those come back as answers (``LoadedModel.answer``).
REPLICA_LOST = (
    ray_errors.RayActorError,  # ActorDiedError, ActorUnavailableError
    ray_errors.WorkerCrashedError,
    ray_errors.NodeDiedError,
    ray_errors.ObjectLostError,  # OwnerDiedError included
    ReplicaUnavailableError,
)
logger = logging.getLogger("ray.serve")  # Serve's logger: its lines land in the replica's own log file


def resolve(model_dir: str) -> Path:
    """A relative model folder lives beside this package (the exported folder, wherever Ray unpacked it)."""
    return (Path(__file__).resolve().parents[2] / model_dir).resolve()


class LoadedModel:
    """A model folder (the cwd, see ``enter``) loaded as a TorchServe worker loads it; ``answer`` runs ``handle``
    on one batch."""

    def __init__(
        self,
        folder: Path,
        name: str | None = None,
        gpu_id: int | None = None,
        metrics: Any = None,
        envelope: str | None = None,
    ):
        self.manifest, self.config = read_folder(folder)
        model = self.manifest.get("model") or {}
        self.name = name or model.get("modelName") or folder.name
        self.version = str(model.get("modelVersion") or "")
        handler = model.get("handler") or f"{HANDLER_MODULE}.py"
        metrics = metrics if metrics is not None else RayMetrics(self.name)
        self.entry, self.context = load_handler(folder, self.name, handler, self.config, gpu_id, metrics, envelope)
        self.context.cl_socket = ChunkSocket(self.context)  # send_intermediate_predict_response writes here
        # an own handler that streams with TorchServe's intermediate responses (its module names the call)
        self.sends_chunks = sends_intermediate(Path(handler.partition(":")[0]).stem)

    def answer(self, requests: list[tuple[bool, bytes, dict]]) -> list[tuple[int, dict, bytes]]:
        """One ``handle`` call for the batch; each request gets its own status, headers and body."""
        headers = [{**h, **({"explain": "True"} if explain else {})} for explain, _, h in requests]
        data = [
            {"body": wire.decode_body(body, h.get("content-type", ""))} for (_, body, _), h in zip(requests, headers)
        ]
        set_requests(self.context, headers)
        try:
            answers = self.entry(data, self.context)
        except Exception as err:
            return [wire.prediction_error(err) or ingress.failed("Prediction", err)] * len(requests)
        if not isinstance(answers, list) or len(answers) != len(requests):
            got = len(answers) if isinstance(answers, list) else type(answers).__name__
            message = f"number of batch response mismatched: {len(requests)} requests, handle returned {got}"
            return [error_reply(503, "InternalServerException", message)] * len(requests)
        procs = self.context.request_processor
        return [
            wire.encode_answer(a, p.get_response_status_code(), p.get_response_headers())
            for a, p in zip(answers, procs)
        ]

    def describe(self, customized: bool, headers: dict) -> tuple[int, dict, bytes]:
        """TorchServe's ``GET /models/NAME[?customized=true]``: the model's entry; customized, with
        ``customizedMetadata`` from one ``handle([{}], context)`` call whose request header is ``describe: True``
        (BaseHandler answers it with ``describe_handle()``), JSON text or an object as TorchServe takes it."""
        entry = management.describe_entry(
            self.name, self.version, management.archive_url(self.name), self.config, [], True
        )
        if customized:
            set_requests(self.context, [{**headers, "describe": "True"}])
            try:
                answers = self.entry([{}], self.context)
            except Exception as err:
                return wire.prediction_error(err) or ingress.failed("Describe", err)
            entry["customizedMetadata"] = metadata(answers[0] if isinstance(answers, list) and answers else None)
        return 200, {"content-type": JSON_TYPE}, json.dumps([entry]).encode()


# No access log line per request (enable_access_log): on two cores writing it cost about as much as the model.
QUIET = {"enable_access_log": False}


MODEL = "MsnbModel"  # every model application's one deployment


@serve.deployment(name=MODEL, logging_config=QUIET)
class MsnbModel:
    """A replica of one model folder; ``infer`` is batched like TorchServe's batchSize/maxBatchDelay."""

    def __init__(
        self,
        model_dir: str,
        name: str | None = None,
        env: dict | None = None,
        envelope: str | None = None,
        ingress_config: dict | None = None,
        install: list | None = None,
    ):
        import ray

        os.environ.update(env or {})  # this model's --env variables, in this replica's process only, before its code
        runtime_env.install_once(resolve(model_dir), install or [])  # what this node lacks, once, beside the model
        worker_logs()
        gpu_id = replica_gpu_id(ray.get_gpu_ids())
        self.model = LoadedModel(enter(resolve(model_dir)), name, gpu_id, envelope=envelope)
        size, wait_s = batch_settings(self.model.config)
        for batched in (self._batch, self._stream):  # whole answers, streamed answers (ray.streaming)
            batched.set_max_batch_size(size)
            batched.set_batch_wait_timeout_s(wait_s)
        self.timeout_s, self.stuck = response_timeout(self.model.config), ""  # ray.timeout
        # its own ingress checks when the local front sends its predictions straight here (``direct_route``), else none
        config, self.routes = ingress_config, StreamRoutes()
        self.ingress_config = ingress.IngressConfig(config) if config is not None else None
        self.api = ApiRoutes(PerModelRoute(self))  # OpenAI's API for this model alone, sent here by the front

    async def __call__(self, request: Request) -> Response:
        """``/predictions/NAME[/VERSION[/...]]`` (by any method, as TorchServe), sent straight to this replica by the local
        front (msnb.engines.ray.ingress): the router's ingress checks and answer, without the router's hop."""
        parts, headers = [p for p in request.url.path.split("/") if p], ingress.lower(request.headers)
        config = self.ingress_config
        forbidden = config.forbidden(request.url.path, headers) if config is not None else None
        if forbidden is not None:
            return forbidden
        if config is not None and parts[2:] == [ingress.OWN_API, ingress.EXPLAIN[1:]]:  # its /explanations/NAME
            return await ingress.explanation(request, headers, config, lambda body: self.infer(True, body, headers))
        if config is not None and parts[2:3] == [ingress.OWN_API]:  # OpenAI's API for this model (ray.api)
            return await self.api.answer(request, "/" + "/".join(parts[3:]), headers)
        call = ingress.inference_call(request.url.path)
        if config is None or call is None or request.method == "OPTIONS":
            return ingress.not_found()
        refusal = refused(headers, config.key) or ingress.other_version(
            self.model.name, self.model.version, call.version
        )
        if refusal:
            return reply(*error_reply(*refusal))
        name, headers = self.model.name, call.headers(headers)
        return await ingress.prediction(
            request,
            headers,
            config.limit,
            lambda body: self.routes.answer(name, self._streams, lambda: self.infer_stream(body, headers)),
            lambda body: self._whole(body, headers),
        )

    async def _streams(self) -> bool:
        return streams(self.model)

    async def _whole(self, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        status, head, answer = await self.infer(False, body, headers)
        return status, self.routes.note(self.model.name, head), answer

    async def infer(self, explain: bool, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        return await self._batch((explain, body, headers))

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0)
    async def _batch(self, requests: list) -> list:
        # handle() is synchronous user code: run it off the replica's event loop, for at most responseTimeout.
        try:
            return await bounded(lambda began: answer_whole(self.model, requests, began), self.timeout_s)
        except TimeoutError:
            self.stuck = f"{self.model.name}: a batch ran past its responseTimeout of {self.timeout_s:g} s"
            logger.error("%s; this replica asks to be replaced, as TorchServe restarts its worker", self.stuck)
            return timed_out(len(requests))

    def check_health(self) -> None:
        if self.stuck:  # Serve replaces an unhealthy replica (ray.timeout)
            raise RuntimeError(self.stuck)

    async def describe(self, customized: bool, headers: dict) -> tuple[int, dict, bytes]:
        return await asyncio.to_thread(locked, self.model, self.model.describe, customized, headers)

    def streams(self, card: bool = False) -> bool | dict:  # card: how /v1 and /mcp show the model (ray.api)
        return model_card(self.model, self.ingress_config and self.ingress_config.key) if card else streams(self.model)

    async def infer_stream(self, body: bytes, headers: dict):
        """One prediction's answer as items of ray.streaming (called with ``handle.options(stream=True)``)."""
        async for item in relay(self._stream, body, headers):
            yield item

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0)
    async def _stream(self, requests: list):
        async for items in stream_batch(self.model, requests, self.timeout_s, self._stalled):
            yield items

    def _stalled(self) -> tuple[int, dict, bytes]:
        """A streaming batch that sent nothing for responseTimeout: the replica asks to be replaced; its answer to
        a request not yet answered (ray.timeout)."""
        self.stuck = f"{self.model.name}: a stream sent nothing for its responseTimeout of {self.timeout_s:g} s"
        logger.error("%s; this replica asks to be replaced, as TorchServe restarts its worker", self.stuck)
        return timed_out(1)[0]


@serve.deployment(name="MsnbRouter", max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0}, logging_config=QUIET)
class MsnbRouter(SetRouting):
    """``POST /predictions/NAME[/VERSION]`` and ``/explanations/NAME[/VERSION]`` to application NAME; ``/ping``;
    ``GET /models`` and ``GET /models/NAME[/VERSION][?customized=true]`` (TorchServe's list and describe, the
    latter answered by a replica of NAME; a write call answers 405 with a Hint).
    Every path asks for the inference key as TorchServe's inference API does (``args``: see ``router``)."""

    async def __call__(self, request: Request) -> Response:
        parts = [p for p in request.url.path.split("/") if p]
        headers, config = ingress.lower(request.headers), self.ingress_config
        forbidden = config.forbidden(request.url.path, headers)  # another host or web origin: 403 (api.hosts)
        if forbidden is not None:
            return forbidden
        call = ingress.inference_call(request.url.path)  # KServe v1's /v1/models/NAME:predict is TorchServe's
        if parts[:1] in (["v1"], ["mcp"]) and call is None:  # OpenAI's API and MCP (ray.api), their own 401
            return await self.api.answer(request, "/" + "/".join(parts), headers)
        refusal = refused(headers, config.key)
        if refusal:
            return reply(*error_reply(*refusal))
        if parts == ["ping"]:
            return reply(200, {"content-type": JSON_TYPE}, b'{"status": "Healthy"}')
        if request.url.path == ingress.TARGETS_PATH:
            return reply(200, {"content-type": JSON_TYPE}, json.dumps(await self.targets()).encode())
        if parts[:1] == ["models"] and len(parts) <= 4:  # TorchServe's management API: reads answered here
            return reply(*await self.manage(request.method, parts, dict(request.query_params), headers))
        if call is None or request.method == "OPTIONS":  # TorchServe's OpenAPI description, else its 404
            return ingress.description(request.method, request.url.path) or ingress.not_found()
        name, headers = self.versioned(call.name, call.version), call.headers(headers)
        if name in self.idle:  # scaled to 0 workers
            return reply(*error_reply(*management.no_worker(call.name, call.version)))
        if name in self.starting:  # registered with synchronous=false: TorchServe queues it for the starting workers
            await wait_while(lambda: name in self.starting and self.app_handle(name) is None, STARTING_WAIT_S)
        return await ingress.prediction(
            request,
            headers,
            config.limit,
            lambda body: self.stream(name, call.explain, body, headers),
            lambda body: self.forward(name, call.explain, body, headers),
        )

    idle: frozenset[str] = frozenset()  # the model applications scaled to 0 workers (user_config: TorchServe's 503)
    starting: frozenset[str] = frozenset()  # those registered without waiting, their replicas starting

    def reconfigure(self, config: dict | None) -> None:
        """The router's user_config: the replica sets (SetRouting), the applications with no worker and starting."""
        super().reconfigure(config)
        self.idle = frozenset((config or {}).get("idle") or ())
        self.starting = frozenset((config or {}).get("starting") or ())

    def __init__(self, args: dict | None = None):
        self.handles: dict[str, Any] = {}
        self.controller = None  # Serve's controller, once ``targets`` asks it
        self.ingress_config = config = ingress.IngressConfig(args or {})
        self.key, self.key_hint = config.key, config.key_hint  # /v1 and /mcp ask for it too (ray.api)
        self.streams = StreamRoutes()  # which models stream, and their answers as they come (ray.streaming)
        self.api = ApiRoutes(self)  # /v1 and /mcp
        if (args or {}).get("watch"):  # an export: a replica Serve cannot place is said, with a Hint
            import threading

            self.watching = threading.Event()
            threading.Thread(target=runtime_env.watch, args=(logger, self.watching), daemon=True).start()

    async def targets(self) -> dict[str, list[str]]:
        """Serve's HTTP target groups, ``{route prefix: [replica URL, ...]}``: with direct ingress on, each
        application's ingress replicas at their own ports (the local front reads them every 0.2 s), else Serve's
        proxies; none for an application scaled to 0 workers (its predictions come here: TorchServe's 503). The
        controller's handle is looked up once (it follows the controller across restarts)."""
        if self.controller is None:
            import ray
            from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

            self.controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        groups = await self.controller.get_target_groups.remote()
        found = {g.route_prefix: [f"http://{t.ip}:{t.port}" for t in g.targets] for g in groups if g.protocol == "HTTP"}
        idle = {ingress.model_route(app.replace("@", "/")) for app in self.idle}  # (ingress.version_app's '@')
        return {route: urls for route, urls in set_targets(found, self.sets).items() if route not in idle}

    def versioned(self, name: str, version: str | None) -> str:
        """The application of ``NAME[/VERSION]``: a version served beside the default one has its own
        (``ingress.version_app``: the local engine's management API), else NAME's own serves it."""
        app = ingress.version_app(name, version) if version is not None else name
        return app if app in self.idle or self.app_handle(app) is not None else name

    def app_handle(self, name: str) -> Any:
        """Application ``name``'s handle, kept (see ``forward``); None when there is no such application."""
        if name not in self.handles:
            try:
                handle = serve.get_app_handle(self.sets.get(name, name))
            except Exception:  # no such application
                return None
            self.handles[name] = SetHandle(handle, name) if name in self.sets else handle
        return self.handles[name]

    async def manage(self, method: str, parts: list[str], query: dict, headers: dict) -> tuple[int, dict, bytes]:
        """TorchServe's management read calls (ray.management): ``GET /models`` (paged) and ``GET
        /models/NAME[/VERSION][?customized=true]``; its write calls answer 405 with a Hint (the RayService's)."""
        if method != "GET":
            if management.is_write(method, parts):
                return error_reply(*management.write_refused(method, "/" + "/".join(parts)))
            return error_reply(405, "MethodNotAllowedException", management.NOT_ALLOWED)
        if len(parts) == 4:
            return error_reply(404, "ResourceNotFoundException", management.NOT_FOUND)
        states = members_of(await asyncio.to_thread(replica_states), self.sets)  # a set: its models
        if len(parts) == 1:
            try:
                models = [
                    (n, management.archive_url(n)) for n in states if not ingress.is_version_app(n)
                ]  # one per name
                return json_reply(*management.page(models, query))
            except ValueError as err:
                return error_reply(400, "BadRequestException", str(err))
        customized = query.get("customized", "").lower() == "true"
        return await self.describe(parts[1], parts[2] if len(parts) == 3 else None, customized, headers, states)

    async def describe(
        self, name: str, version: str | None, customized: bool, headers: dict, states: dict[str, dict[str, int]]
    ) -> tuple[int, dict, bytes]:
        """TorchServe's ``GET /models/NAME[/VERSION][?customized=true]``: a replica's entry, with the
        application's replicas as its workers."""
        if name in self.idle:  # no replica to describe it
            return error_reply(*management.no_worker(name, describe=True))
        handle = self.app_handle(name) if name in states else None
        if handle is None:
            return error_reply(404, "ModelNotFoundException", f"Model not found: {name}")
        try:
            status, head, body = await handle.describe.remote(customized, headers)
        except Exception as err:
            return self.unavailable(name, err)
        if status != 200:
            return status, head, body
        entries = json.loads(body)
        if version is not None and entries[0]["modelVersion"] != version:
            return error_reply(
                404, "ModelVersionNotFoundException", f"Model version: {version} does not exist for model: {name}"
            )
        entries[0]["workers"] = management.replica_workers(states[name])
        return json_reply(200, entries)

    def unavailable(self, name: str, err: Exception) -> tuple[int, dict, bytes]:
        """The answer to a call that failed: 404 when its application was deleted since its handle was kept
        (``LocalRay.unregister``, ``serve delete``), as TorchServe answers for an unregistered model; else 503."""
        if isinstance(err, DeploymentUnavailableError):  # deleted, or failed for good: look the application up again
            self.handles.pop(name, None)
            if self.app_handle(name) is None:
                return error_reply(404, "ModelNotFoundException", f"Model not found: {name}")
        return error_reply(503, "ServiceUnavailableException", f"{type(err).__name__}: {err}")

    async def stream(self, name: str, explain: bool, body: bytes, headers: dict) -> Response | None:
        """A streaming model's prediction passed on as it comes; None: ``forward`` answers it whole."""
        if explain or self.app_handle(name) is None:  # no such application: forward says so
            return None
        handle = self.handles[name]
        try:
            return await self.streams.answer(
                name, handle.streams.remote, lambda: handle.options(stream=True).infer_stream.remote(body, headers)
            )
        except Exception as err:
            return reply(*self.unavailable(name, err))

    async def forward(self, name: str, explain: bool, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        # A handle follows its application across redeploys; looking one up while the application is
        # redeploying fails (measured: 254 of ~1,000 requests got a 404 during a rolling update), so keep it.
        handle = self.app_handle(name)
        if handle is None:
            return error_reply(404, "ModelNotFoundException", f"Model not found: {name}")
        for attempt in range(1, REPLICA_TRIES + 1):
            try:
                status, head, answer = await handle.infer.remote(explain, body, headers)
                return status, self.streams.note(name, head), answer
            except Exception as err:
                if attempt == REPLICA_TRIES or not replica_lost(err):
                    return self.unavailable(name, err)
                logger.warning(
                    "%s: replica lost (%s), sending the request again (try %d)", name, brief(err), attempt + 1
                )
        raise AssertionError("unreachable")


def replica_states() -> dict[str, dict[str, int]]:
    """Each model application's replicas by state (its MsnbModel deployment's; a replica set's MsnbModels')."""
    return model_states(serve.status().applications, MODEL)


def json_reply(status: int, body: Any) -> tuple[int, dict, bytes]:
    return status, {"content-type": JSON_TYPE}, json.dumps(body).encode()


def replica_lost(err: BaseException) -> bool:
    """Whether ``err`` says the replica went (a Serve handle may wrap the Ray error as its cause)."""
    return isinstance(err, REPLICA_LOST) or isinstance(getattr(err, "cause", None) or err.__cause__, REPLICA_LOST)


def brief(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


def model(args: dict) -> Any:
    """Application builder for one model folder: ``args`` = model_dir, and optionally name, num_cpus, num_gpus,
    memory (bytes), check_resources (default true: refuse what no node can hold, ray.runtime_env), gpu_memory_mb
    (to turn maxGPUMemory into a GPU fraction), install_requirements (default true: what the node lacks) or the
    requirements to install, envelope (TorchServe's service_envelope), max_replicas_per_node, max_surge_percent, running
    (the replicas running now: a scale keeps them within minWorkers..maxWorkers),
    env_vars (the variables its replicas get, set before the folder loads) and ingress_config (the router's args:
    when the application has its ``direct_route``, its replicas answer its predictions themselves)."""
    folder = resolve(str(args["model_dir"]))
    _, config = read_folder(folder)
    wanted = requirements_of(folder) if args.get("install_requirements", True) else []
    # given (the notebook's engine: what its environment lacks): Ray's runtime_env pip; else what the node lacks,
    # installed once beside the model folders by the first replica of the node (ray.runtime_env.install_once)
    runtime = list(args["requirements"]) if "requirements" in args else []
    install = [] if "requirements" in args else runtime_env.missing(wanted)
    cpus, running = float(args.get("num_cpus", 1.0)), args.get("running")  # running: a scale's (deployment_options)
    options = deployment_options(config, runtime, cpus, args.get("gpu_memory_mb"), running)
    runtime_env.sized(options["ray_actor_options"], args)  # num_gpus and memory as the export sized them
    if str(args.get("check_resources", True)).lower() != "false":  # never a silent wait for an unplaceable replica
        runtime_env.check(str(args.get("name") or args["model_dir"]), options)
    for key in ("max_replicas_per_node", "max_surge_percent"):  # surge: new replicas start before old ones stop
        if args.get(key) is not None:
            options[key] = int(args[key])
    # The variables this model is given (--env) go to its replicas as a constructor argument, not as runtime_env
    # env_vars: Ray 2.60's runtime_env_agent.log writes a runtime_env's env_vars, values included.
    env = {str(k): str(v) for k, v in (args.get("env_vars") or {}).items()}
    model_dir, given = str(args["model_dir"]), args.get("ingress_config")
    return MsnbModel.options(**options).bind(model_dir, args.get("name"), env, args.get("envelope"), given, install)


def direct_route(name: str, config: dict) -> str | None:
    """The route prefix of model ``name``'s application, at which its replicas answer its predictions themselves
    (the local front sends them straight there); None for a stateful model: each of its sequences must reach the
    replica that holds it, which the router's handle does (``SequenceRouter``)."""
    return None if config.get("sequenceBatching") else ingress.model_route(name)


def router(args: dict | None = None) -> Any:
    """Application builder for the router (``args``: num_replicas, max_replicas_per_node, and resources to pin
    it to the nodes that run an HTTP proxy; ``sets``: which replica set serves each packed model (ray.multi_model);
    ``idle``: the model applications scaled to 0 workers (TorchServe's 503 for their predictions); ``starting``:
    those registered without waiting whose replicas start (their predictions wait for them);
    ``max_request_size`` in bytes (413 above it); the inference key: ``key_file`` (else $MSNB_INFERENCE_KEY_FILE or $MSNB_INFERENCE_KEY, read where the router runs), or
    ``auth: false`` to answer without one)."""
    args = args or {}
    config = {k: args[k] for k in ("key_file", "auth", "max_request_size", "watch", "key_hint") if k in args}
    token_interceptor.inference_key(config)  # no key on the cluster: refused here, not by a replica retried in a loop
    options: dict[str, Any] = {"num_replicas": int(args.get("num_replicas", 1))}
    if args.get("max_replicas_per_node"):
        options["max_replicas_per_node"] = int(args["max_replicas_per_node"])
    if args.get("resources"):
        options["ray_actor_options"] = {"num_cpus": 0, "resources": dict(args["resources"])}
    sets = {"sets": dict(args.get("sets") or {}), **{k: sorted(args.get(k) or ()) for k in ("idle", "starting")}}
    options = with_code_version({**options, "user_config": sets}, config)
    return MsnbRouter.options(**options).bind(config)
