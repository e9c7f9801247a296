"""Ray Serve as a second engine: the exported Serve layout (``msnb export --ray``) and a kernel-owned local Ray.

Ray is optional (``pip install "msnb[ray]"``): nothing here imports it until it is used, and ``require``
turns its absence into an error that names the extra.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from msnb.engines.protocol import Engine, EngineKind, Layout, ServeOptions
from msnb.engines.ray.deferred import defer
from msnb.engines.ray.packing import DEFAULT_MODELS_PER_REPLICA
from msnb.errors import MsnbError

RAY_VERSION = "2.60.0"
# Read by Ray when it is imported. RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: otherwise an address 127.0.0.1:P is
# rewritten to the eth0 address, where a loopback GCS does not listen ("Failed to connect to GCS").
# The timeouts: on a busy 2-core machine a node, or Serve's HTTP proxy, takes longer than Ray's defaults (5 s for
# the proxy's readiness: it was killed and restarted in a loop at a load average of 24).
ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_raylet_start_wait_time_s": "120",
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30",
    "RAY_prestart_worker_first_driver": "0",  # no idle workers started for a driver (Serve starts its own)
    # A request's way through Serve: each replica runs its deployment's code on its own event loop (no hand-over
    # to a second loop's thread and back), a handle routes on the caller's loop, and calls between deployments
    # (the router's to a model's replica) go over Serve's gRPC (token-checked, see msnb_runtime.ray.token_interceptor) instead of
    # Ray actor calls. Measured by time stamps along the way: a stream's first chunk 36 -> 16 ms (load 15-25).
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1",
    # Serve's own request metrics are cached and exported every 100 ms by each proxy, handle and replica: every
    # second is enough for a Prometheus scrape and leaves the two cores to the requests.
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    # Each application's ingress replica answers HTTP on a loopback port of its own, which the local front
    # (msnb.engines.ray.ingress) sends predictions to: no proxy and no router on their way. A stopping replica keeps
    # answering for the draining period while the front, which reads the routes every 0.2 s, leaves it (Serve's
    # default, 30 s, is for a cloud load balancer's health checks; every stop and redeploy would wait it out).
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1",
    # No task events: each Ray process would send its tasks' state changes to the GCS every second, for the
    # dashboard's state API (`ray list tasks`), which a local Ray without a dashboard never shows. The kernel's
    # `ray.shutdown()` (`%ms_stop`) then waits for no last send: twice in CI runs it hung there, in
    # `TaskEventBufferImpl::Stop`, until the cell's 400 s ran out.
    "RAY_task_events_report_interval_ms": "0",
}
# How often Serve's client asks the controller while `serve.run` or `serve.delete` waits for an application to run or
# to be gone (Serve: once a second, ray.serve._private.client's CLIENT_POLLING_INTERVAL_S). An unregister, a redeploy
# and a scale are over in a few tenths of a second: each waited out the rest of that second. (That second also let
# the front read its routes again before the call returned; now the engine asks it to: LocalRay.routes_changed.)
# A redeploy's own wait for its replicas to start (ReplicaSets.wait_started) asks as often.
SERVE_POLL_S = 0.1
ROUTER_APP = "msnb-router"  # the router application (templates/msnb_runtime/ray/app.py:router), locally and exported
INSTALL_HINT = 'install the Ray extra: pip install "msnb[ray]" (ray[serve]==' + RAY_VERSION + ")."


class RayMissingError(MsnbError):
    """Ray Serve is not installed (the optional ``ray`` extra)."""


def require() -> ModuleType:
    """``ray.serve``, imported (with msnb's Ray environment set first); a ``RayMissingError`` naming the extra
    when it is not installed."""
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    if "ray.serve" not in sys.modules:
        defer()  # what Ray imports and seldom calls, imported on its first call (a second of CPU)
    try:
        serve = importlib.import_module("ray.serve")
    except ImportError as err:
        raise RayMissingError(f"Ray Serve is not installed ({err}).", INSTALL_HINT) from None
    client = sys.modules.get("ray.serve._private.client")
    if client is not None and hasattr(client, "CLIENT_POLLING_INTERVAL_S"):  # (a Ray without it waits as it did)
        client.CLIENT_POLLING_INTERVAL_S = SERVE_POLL_S
    return serve


def _default(port: int | None = None) -> Engine:
    """The notebook's local Ray Serve (on ``port``; not started here): the shared Ray (`msnb ray up`) when it is up."""
    from msnb.engines.ray.engine import default_ray
    from msnb.engines.ray.shared import attached

    return default_ray(port, attached)


def _running() -> bool:
    engine = sys.modules.get("msnb.engines.ray.engine")  # never imported: no local Ray was ever made here
    return engine is not None and engine.default_running()


def _command(options: ServeOptions) -> Engine:
    """`msnb serve --engine ray`'s Ray (not started): one on TorchServe's start options' addresses and key when they
    are given, else the shared Ray (`msnb ray up`) when it is up, else one of its own."""
    from msnb.engines.ray import ts_start
    from msnb.engines.ray.engine import LocalRay
    from msnb.engines.ray.shared import attached

    packing = {
        "own_replica": options.own_replica,
        "models_per_replica": options.models_per_replica,
        "loaded_per_replica": options.loaded_per_replica,
    }
    packing = {k: v for k, v in packing.items() if v}
    if options.ts is not None:
        return ts_start.engine_for(options.ts, **packing)
    return attached(options.max_request_size, **packing) or LocalRay(
        max_request_size=options.max_request_size, **packing
    )


def _start_options(engine: Engine, config: object, opener: object) -> object:
    from msnb.engines.ray.ts_start import TorchServeApi

    return TorchServeApi(engine, config, opener)


def _deploy_archives(*args, **kwargs):
    from msnb.engines.ray.serve_archives import deploy_archives

    return deploy_archives(*args, **kwargs)


def _layout() -> Layout:
    """The export's layout (``msnb.engines.ray.export``: the module is the ``Layout``)."""
    return importlib.import_module("msnb.engines.ray.export")


def _shared(action: str, port: int | None, say) -> None:
    """`msnb ray ACTION` and `%ms_ray ACTION` on the shared local Ray (``msnb.engines.ray.shared``)."""
    from msnb.engines.ray.shared import command

    command(action, port, say)


ENGINE = EngineKind(
    "ray",
    "Ray Serve",
    "starting Ray Serve",
    _default,
    _running,
    require,
    "msnb.engines.ray.engine.LocalRay",
    "ray",
    command=_command,
    deploy_archives=_deploy_archives,
    start_options=_start_options,
    layout=_layout,
    shared=_shared,
    models_per_replica=DEFAULT_MODELS_PER_REPLICA,
)
