"""Which model folders share a replica on the local Ray (a replica set: the runtime's ray.multi_model), by a rule a
person can read.

A model shares a replica set unless it needs a process of its own: named by ``--own-replica NAME``, asking for a GPU
(deviceType gpu), stateful (sequenceBatching: each sequence must reach its replica), streaming (a stream holds its
process for its whole answer), with requirements Ray installs per replica (runtime_env), or with
``--models-per-replica 1``. Models with the same workers (minWorkers, maxWorkers) share a set, at most K of them
(``--models-per-replica K``, default 8), in the order they are served: a set takes new members while it has room,
loading each into its running replicas; a full set is followed by a new one.

At most L models stay loaded in one replica (``--loaded-per-replica L``; default K): a set of more members (K > L,
or a set that took more than K because Ray had no CPUs left for a new set: ``overflow``) loads each once when it
joins, then keeps the L most recently used loaded; an evicted model's next request waits for its load
(the runtime's ray.residency).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODELS_PER_REPLICA = 8
SET_PREFIX = "msnb-models-"  # the replica sets' applications: msnb-models-1, msnb-models-2, ...
# What a handler's text says when it streams: TorchServe's intermediate responses (an own handler), or, in msnb's
# handler_model.py, a generator role.
STREAMS = "send_intermediate_predict_response"


@dataclass
class ReplicaSet:
    """One replica set: its application, the workers its members share, each member's entry (model application
    -> what its slot loads: multi_model.member's fields), and the replicas a new set starts from (``running``: those
    of the model a scale moved into it, kept within its workers as TorchServe keeps its workers; None: Serve's
    min_replicas, or, once the set is deployed, the replicas Serve runs); ``shared``: a set other processes' models
    fill too (the shared Ray's standing set, msnb.engines.ray.shared_sets), which only its own rule joins."""

    app: str
    workers: tuple[int, int]
    members: dict[str, dict] = field(default_factory=dict)
    running: int | None = None
    shared: bool = False


class Packing:
    """The local Ray's replica sets and the rule that fills them (``models_per_replica``: K; ``own``: the model names
    that get a replica of their own; ``prefix``: the sets' application names, one process's own on the shared Ray)."""

    def __init__(
        self,
        models_per_replica: int = DEFAULT_MODELS_PER_REPLICA,
        own: Iterable[str] = (),
        loaded_per_replica: int | None = None,
        prefix: str = SET_PREFIX,
    ):
        self.models_per_replica, self.own, self.prefix = max(1, int(models_per_replica)), set(own), prefix
        # L: at most this many loaded in one replica (None: K)
        self.loaded_per_replica = max(1, int(loaded_per_replica or self.models_per_replica))
        self.sets: dict[str, ReplicaSet] = {}
        self._numbers = itertools.count(1)

    def own_replica(self, folder: Path, name: str, extra: dict) -> str | None:
        """Why model ``name`` (its folder, its deploy's extra args) needs a replica of its own; None: it shares."""
        from msnb.templates.msnb_runtime.handler.serving import ServingConfig
        from msnb.templates.msnb_runtime.ts.model_loader import read_folder

        _, config = read_folder(folder)
        serving = ServingConfig.from_model_config(config)
        reasons = [
            (self.models_per_replica == 1, "--models-per-replica 1"),
            (name in self.own, "--own-replica"),
            (serving.device == "gpu", "it asks for a GPU"),
            (bool(config.get("sequenceBatching")), "it is stateful (sequenceBatching)"),
            (bool(extra.get("requirements")), "Ray installs its requirements per replica (runtime_env)"),
            (streams(folder), "it streams (a stream holds its replica's process)"),
        ]
        return next((why for asked, why in reasons if asked), None)

    def place(self, app: str, entry: dict, workers: tuple[int, int]) -> tuple[ReplicaSet, bool]:
        """The set ``app`` joins (a set with its workers and room, else a new one) and whether that set is new."""
        for rs in self.sets.values():
            if rs.shared:
                continue
            if rs.workers == workers and (app in rs.members or len(rs.members) < self.models_per_replica):
                rs.members[app] = entry
                return rs, False
        rs = ReplicaSet(f"{self.prefix}{next(self._numbers)}", workers, {app: entry})
        self.sets[rs.app] = rs
        return rs, True

    def overflow(self, app: str, entry: dict, workers: tuple[int, int]) -> ReplicaSet | None:
        """The set ``app`` joins beyond K when no new set can start (Ray's CPUs are taken): the one with its workers
        and the fewest members (its replicas keep ``loaded_per_replica`` loaded); None when no set has its workers."""
        self.remove(app)
        fits = [rs for rs in self.sets.values() if rs.workers == workers and not rs.shared]
        if not fits:
            return None
        rs = min(fits, key=lambda rs: len(rs.members))
        rs.members[app] = entry
        return rs

    def set_of(self, app: str) -> ReplicaSet | None:
        return next((rs for rs in self.sets.values() if app in rs.members), None)

    def remove(self, app: str) -> ReplicaSet | None:
        """Take ``app`` out of its set (the set forgotten once empty); the set it left, or None."""
        rs = self.set_of(app)
        if rs is not None:
            del rs.members[app]
            if not rs.members:
                del self.sets[rs.app]
        return rs

    def routes(self) -> dict[str, str]:
        """Each packed model application's set (the router's user_config, ray.multi_model_routes)."""
        return {app: rs.app for rs in self.sets.values() for app in rs.members}

    def clear(self) -> None:
        self.sets.clear()


def workers(folder: Path) -> tuple[int, int]:
    """A folder's (minWorkers, maxWorkers) as its replicas' count (the runtime's ray.deployment.workers)."""
    from msnb.templates.msnb_runtime.handler.serving import ServingConfig
    from msnb.templates.msnb_runtime.ray.deployment import workers as replicas
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    return replicas(ServingConfig.from_model_config(read_folder(folder)[1]))


def streams(folder: Path) -> bool:
    """Whether the folder's handler module says it streams (read, not run: before anything loads)."""
    from msnb.templates.msnb_runtime.handler.names import HANDLER_MODULE
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    manifest, _ = read_folder(folder)
    handler = (manifest.get("model") or {}).get("handler") or f"{HANDLER_MODULE}.py"
    module = Path(handler.partition(":")[0]).stem
    try:
        text = (folder / f"{module}.py").read_text(errors="replace")
    except OSError:  # a default handler by name (TorchServe's own): none of them streams
        return False
    return STREAMS in text or (module == HANDLER_MODULE and "yield" in text)


def own_route(folder: Path, app: str) -> str | None:
    """The route at which a model's own application answers its predictions (the front sends them there): the
    model's ``/predictions/NAME``, or ``/predictions/NAME/VERSION`` for another version's application
    (msnb_runtime.ray.ingress.version_app); None for a stateful model (the router's handle keeps its sequences)."""
    from msnb.engines.store import read_manifest
    from msnb.templates.msnb_runtime.ray.app import direct_route, read_folder

    name, version = read_manifest(folder)
    route = direct_route(name, read_folder(folder)[1])
    return f"{route}/{version}" if route and app != name else route
