"""The router's side of replica sets (ray.multi_model: one Serve application whose replicas each hold several model
folders): which set serves a model's application, a handle that names the model on each call, and the routes that
send a model's predictions straight to its set's replicas.

The router learns the sets from its ``user_config`` (``{"sets": {model application: set application}}``): Serve
hands a changed one to the running router replicas (``reconfigure``) without restarting them.
Depends on the standard library and ray.ingress, never on msnb or Ray.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from .ingress import model_route

MODELS = "MsnbModels"  # every replica set application's one deployment (ray.multi_model)
SETS_ROUTE = "/-/msnb-sets"  # a set's route prefix is SETS_ROUTE/SET: the local front prefixes its paths with it
# A replica set's user_config key: at most that many of its models loaded in one replica (ray.residency; Ray Serve's
# multiplexing calls the same limit max_num_models_per_replica)
MAX_LOADED = "max_num_models_per_replica"
LOADED_PATH = "/-/loaded"  # SETS_ROUTE/SET/-/loaded: what the set's replica loaded (the local engine asks it)
# A set's requests per member (Serve's own request metrics count the set's application): Ray counters tagged with
# the member's application as model_name, which msnb.engines.ray.metrics writes under TorchServe's names.
REQUESTS_METRIC, LATENCY_METRIC = "msnb_set_requests", "msnb_set_latency_ms"


def with_code_version(options: dict, *built_with: Any) -> dict:
    """Deployment ``options`` with a code version of their own. Serve gives a deployment run from Python a random
    version at each ``serve.run`` (ray/serve/_private/client.py), so every change restarts its replicas; a version
    made of what the replicas are built with (``built_with``: their constructor's args; their actor options; the
    adapter's code) makes a change of user_config alone a lightweight update: ``reconfigure`` on the running
    replicas. (``version`` is Serve's own option, given as Serve gives it internally: ``_internal``.)"""
    heavy = {k: v for k, v in options.items() if k in ("ray_actor_options", "max_replicas_per_node")}
    text = json.dumps([built_with, heavy, adapter_digest()], sort_keys=True, default=str)
    return {**options, "version": hashlib.sha256(text.encode()).hexdigest()[:16], "_internal": True}


@functools.lru_cache(maxsize=1)
def adapter_digest() -> str:
    """The adapter's own code (every module of the runtime's rooms: ray, ts, handler, api), as one digest."""
    files = sorted(Path(__file__).resolve().parents[1].glob("*/*.py"))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def set_route(set_app: str) -> str:
    """The route prefix of replica set ``set_app``: its replicas answer ``set_route(S)/predictions/NAME...``."""
    return f"{SETS_ROUTE}/{set_app}"


def app_route(app: str) -> str:
    """The route of model application ``app``: ``/predictions/NAME``, or ``/predictions/NAME/VERSION`` for another
    version's application (``NAME@VERSION``, ingress.version_app)."""
    name, _, version = app.partition("@")
    return model_route(name) + (f"/{version}" if version else "")


def set_targets(groups: dict[str, list[str]], sets: dict[str, str]) -> dict[str, list[str]]:
    """Serve's target groups with each set member's route added: its set's replica URLs with the set's route
    prefix as their path (the local front sends ``/predictions/NAME`` to ``URL/-/msnb-sets/S/predictions/NAME``)."""
    out = dict(groups)
    for app, set_app in sets.items():
        prefix = set_route(set_app)
        if groups.get(prefix):
            out[app_route(app)] = [url + prefix for url in groups[prefix]]
    return out


def strip_set_route(path: str) -> str:
    """``path`` without a set's route prefix (``/-/msnb-sets/S/predictions/N`` -> ``/predictions/N``)."""
    if not path.startswith(SETS_ROUTE + "/"):
        return path
    rest = path[len(SETS_ROUTE) + 1 :]
    return "/" + rest.partition("/")[2]


class SetHandle:
    """A replica set's Serve handle for one of its models: each call names the model's application first, so the
    router calls it as it calls a one-model application (``infer``, ``infer_stream``, ``describe``, ``streams``)."""

    def __init__(self, handle: Any, app: str):
        self.handle, self.app = handle, app

    def options(self, **options: Any) -> SetHandle:
        return SetHandle(self.handle.options(**options), self.app)

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        return _Named(getattr(self.handle, method), self.app)


class _Named:
    def __init__(self, method: Any, app: str):
        self.method, self.app = method, app

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.remote(self.app, *args, **kwargs)


class SetRouting:
    """The router's part of replica sets: ``sets`` (model application -> its set) from its user_config."""

    sets: dict[str, str] = {}  # (never changed in place: ``reconfigure`` gives a new one)
    handles: dict[str, Any]

    def reconfigure(self, config: dict | None) -> None:
        """The router's user_config: each model that moved, came or went loses its kept handle."""
        sets = {str(k): str(v) for k, v in ((config or {}).get("sets") or {}).items()}
        for app in set(self.sets) | set(sets):
            if self.sets.get(app) != sets.get(app):
                self.handles.pop(app, None)
        self.sets = sets


def model_states(applications: dict, one: str) -> dict[str, dict[str, int]]:
    """Each model or replica set application's replica counts by state (``serve.status().applications``: its
    deployment ``one``, a one-model application's, or MODELS)."""
    found = {n: app.deployments.get(one) or app.deployments.get(MODELS) for n, app in applications.items()}
    return {n: dict(d.replica_states) for n, d in found.items() if d is not None}


def members_of(states: dict[str, dict[str, int]], sets: dict[str, str]) -> dict[str, dict[str, int]]:
    """``states`` with each replica set's entry replaced by one per member (its set's replicas are its own)."""
    own = {app: counts for app, counts in states.items() if app not in sets.values()}
    return own | {app: states[s] for app, s in sets.items() if s in states}
