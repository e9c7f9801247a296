"""The local Ray's replica sets at work: model folders placed by msnb.engines.ray.packing, each set deployed as one
application of the runtime's ray.multi_model, members added, replaced and removed through its ``user_config`` (the
running replicas load and unload them in place), and the router told which set serves which model.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msnb.engines.ray import ROUTER_APP, SERVE_POLL_S
from msnb.engines.ray.packing import Packing, ReplicaSet, own_route, workers
from msnb.errors import ServerError

ANSWER_S = 30.0  # how long a set's replica may take to say which models it loaded
# how often a load waited for reads Serve's status (a failed set): each read costs the caller a tenth of a CPU-second
STATUS_S = 1.0
# A replica Serve is bringing up (ray.serve's ReplicaState values): a redeploy's status waits until none is left,
# at most STARTED_S past Serve's RUNNING.
BRINGING_UP = ("STARTING", "UPDATING", "RECOVERING", "PENDING_MIGRATION")
STARTED_S = 30.0


class ReplicaSets:
    """``engine``'s replica sets: ``engine`` (a LocalRay) gives the ingress config, its served folders, a model's status and its
    logs; ``failure(app, text)`` turns a load's text into the error the engine raises (its ``load_error``)."""

    def __init__(self, engine: Any, packing: Packing, failure: Callable[[str, str], ServerError]):
        self.engine, self.packing, self.failure = engine, packing, failure
        self._before: dict[str, dict | None] = {}  # a joining app -> its set's entry before (a replacement's)
        self.idle: frozenset[str] = frozenset()  # the model applications scaled to 0 workers (model_registry's)
        # the model applications registered without waiting (synchronous=false) whose replicas are still starting
        self.starting: frozenset[str] = frozenset()

    def plan(self, models: list[tuple[Path, dict]]) -> Iterator[tuple[str, Any]]:
        """Each model's place (``models``: as LocalRay.deploy_many takes them): its folder when it joins a set,
        (folder, RunTarget) for an application of its own, or the ServerError that refuses it (its replicas do not
        fit in the CPUs Ray has free, and no set of its workers can take it beyond K: packing.overflow)."""
        import ray

        from msnb.engines.store import read_manifest

        free = ray.available_resources().get("CPU", 0.0)
        for folder, extra in models:
            name = read_manifest(folder)[0]
            app = extra.get("app") or name  # another version of a served name (model_registry)
            args = {**self.engine._model_args(folder, name), **{k: v for k, v in extra.items() if k != "app"}}
            placed = self.join(folder, app, args)
            try:
                if placed is None or placed[1]:  # a new application: its replicas need room
                    free -= self.engine._refuse_unschedulable(app, folder, free)
            except ServerError as err:
                if placed is None:
                    yield app, err
                    continue
                if self.packing.overflow(app, placed[0].members[app], placed[0].workers) is None:
                    yield app, err  # (overflow took it out of the new set)
                    continue
            yield app, folder if placed is not None else (folder, own_target(folder, app, args))

    def join(self, folder: Path, app: str, args: dict) -> tuple[ReplicaSet, bool] | None:
        """Place model application ``app`` (its folder and builder args) into a set: (the set, whether it is new);
        None when the model needs a replica of its own (packing's rule)."""
        if self.packing.own_replica(folder, str(args.get("name") or app), args) is not None:
            return None
        rs = self.packing.set_of(app)
        self._before[app] = rs.members[app] if rs is not None else None
        placed = self.place(app, self.entry(folder, app, args), folder)
        if placed[1]:  # a new set: from the replicas the model runs now (a scale's), as its own application starts
            placed[0].running = args.get("running")
        return placed

    def entry(self, folder: Path, app: str, args: dict) -> dict:
        """Model application ``app``'s entry in its set's user_config (what its slot loads: multi_model.member)."""
        entry = {"app": app, "model_dir": str(folder), "name": args.get("name"), "env": args.get("env_vars") or {}}
        if args.get("envelope"):
            entry["envelope"] = args["envelope"]
        return entry

    def place(self, app: str, entry: dict, folder: Path) -> tuple[ReplicaSet, bool]:
        """The set ``app`` joins and whether it is new (packing's rule)."""
        return self.packing.place(app, entry, workers(folder))

    def set_targets(self, joined: dict[str, Path]) -> list[Any]:
        """The Serve RunTargets of the sets the ``joined`` model applications are in, as their members are now."""
        return [self.target(self.packing.set_of(app)) for app in joined]

    def target(self, rs: ReplicaSet) -> Any:
        """The Serve RunTarget of set ``rs`` as its members are now."""
        from ray import serve

        from msnb.templates.msnb_runtime.ray import multi_model
        from msnb.templates.msnb_runtime.ray.multi_model_routes import MAX_LOADED, set_route

        args = {
            "models": list(rs.members.values()),
            MAX_LOADED: self.packing.loaded_per_replica,
            "name": rs.app,
            "install_requirements": False,
            "num_cpus": self.engine.replica_cpus,
            "max_surge_percent": 100,
            "running": rs.running,
            "ingress_config": self.engine._ingress_config(),
        }
        return serve.RunTarget(multi_model.models(args), name=rs.app, route_prefix=set_route(rs.app))

    def settle(self, joined: dict[str, Path], timeout_s: float) -> Iterator[tuple[str, Any]]:
        """Each model application of ``joined`` (app -> folder) once its set's replica has loaded it: its ModelStatus
        (the engine serves the folder), or a ServerError (the folder deleted, the model out of its set, or for a
        replacement its old folder serving on); the router is told the sets first."""
        for rs in self.packing.sets.values():  # deployed: a later update keeps the replicas Serve runs then
            rs.running = None
        outcomes = {}
        for set_app, apps in self._by_set(joined).items():
            outcomes |= self._loaded(set_app, {a: joined[a] for a in apps}, timeout_s)
        for app, outcome in outcomes.items():
            before = self._before.pop(app, None)
            if isinstance(outcome, ServerError):
                self._restore(app, before) if before is not None else self.leave(app, tell_router=False)
        self.tell_router()
        for app, outcome in outcomes.items():
            if isinstance(outcome, ServerError):
                shutil.rmtree(joined[app], ignore_errors=True)
                yield app, outcome
                continue
            previous, self.engine._folders[app] = self.engine._folders.get(app), outcome
            self.engine._drop_unserved(previous)
            yield app, self.engine.status(app)

    def replace(self, folder: Path, app: str, running: int | None = None) -> Any:
        """A packed model's new folder (another version, other settings), loaded beside the old one in its set (or
        in the set its workers now need, a new one starting from the ``running`` replicas kept within its workers):
        its ModelStatus once it serves; a ServerError (the old folder serving on) when it fails."""
        old = self.packing.set_of(app)
        moved = old.workers != workers(folder)
        if moved:  # its set's replicas serve it on until its new place answers
            entry = old.members[app]
            self.packing.remove(app)
        outcome = next(iter(self.engine.deploy_many([(folder, {"app": app, "running": running})])), (app, None))[1]
        if moved and isinstance(outcome, ServerError):
            old.members[app] = entry
            self.packing.sets[old.app] = old
        elif moved:
            self.release(old)
        self.engine.routes_changed()  # the next prediction takes its new replicas (the front read the routes)
        if isinstance(outcome, ServerError):
            raise outcome
        return outcome

    def _restore(self, app: str, entry: dict) -> None:
        rs = self.packing.set_of(app)
        rs.members[app] = entry
        self.run_set(rs, wait=False)

    def run_set(self, rs: ReplicaSet, wait: bool = True) -> None:
        """Set ``rs`` deployed with the members it has now (``wait``: until its replicas let go of what left)."""
        from ray import serve

        serve.run_many(
            [self.target(rs)], wait_for_ingress_deployment_creation=False, wait_for_applications_running=wait
        )

    def _by_set(self, joined: dict[str, Path]) -> dict[str, list[str]]:
        by: dict[str, list[str]] = {}
        for app in joined:
            rs = self.packing.set_of(app)
            by.setdefault(rs.app if rs else "", []).append(app)
        return by

    def _loaded(self, set_app: str, wanted: dict[str, Path], timeout_s: float) -> dict[str, Any]:
        """What set ``set_app``'s replica answers for each wanted member: its folder once it loaded that folder, or
        its load error; a set that failed (or did not answer in ``timeout_s``) fails each of them."""
        from ray import serve

        deadline, found, asked = time.monotonic() + timeout_s, {}, 0.0
        while True:
            found |= self._answers(set_app, wanted)  # (a set not running yet answers nothing)
            if len(found) == len(wanted):
                return found
            if time.monotonic() - asked >= STATUS_S:
                app, asked = serve.status().applications.get(set_app), time.monotonic()
                if (app.status if app is not None else "NOT_STARTED") == "DEPLOY_FAILED" or asked > deadline:
                    text = f"{app.message if app else 'not started'}"
                    return found | {a: self._error(a, set_app, text) for a in wanted if a not in found}
            time.sleep(0.1)

    def _answers(self, set_app: str, wanted: dict[str, Path]) -> dict[str, Any]:
        """The wanted members' outcomes the set's replica gives (``LOADED_PATH``, through the front, with the key)."""
        loaded, found = self.loaded(set_app), {}
        for app, folder in wanted.items():
            got = loaded.get(app) or {}
            if got.get("model_dir") == str(folder):  # this folder's outcome, not an older one's
                found[app] = folder if got.get("error") is None else self._error(app, set_app, got["error"])
        return found

    def loaded(self, set_app: str) -> dict:
        """What a replica of set ``set_app`` says it loaded (its LOADED_PATH, through the front, with the key); {}
        while it changes."""
        from msnb.templates.msnb_runtime.ray.multi_model_routes import LOADED_PATH, set_route

        url = f"{self.engine.inference_url}{set_route(set_app)}{LOADED_PATH}"
        try:
            answer = self.engine.client.call("GET", url, "inference", timeout=ANSWER_S)
            return answer.json() if answer.status_code == 200 else {}
        except (ServerError, ValueError):  # the replica changing meanwhile: ask again
            return {}

    def _error(self, app: str, set_app: str, text: str) -> ServerError:
        return self.failure(app, "\n".join([text, *self.engine.app_log(set_app, 30)]))

    def leave(self, app: str, tell_router: bool = True) -> None:
        """Take ``app`` out of its set: the router first (its requests answer 404 from then on), then the set's
        replicas unload it (the set deleted once empty)."""
        rs = self.packing.remove(app)
        if rs is None:
            return
        if tell_router:
            self.tell_router()
        self.release(rs)

    def release(self, rs: ReplicaSet) -> None:
        """Set ``rs`` deployed with the members it has now, or deleted when it has none."""
        from ray import serve

        if rs.members:  # returns once its replicas let go of what left (as serve.delete returns once they are gone)
            self.run_set(rs)
        else:
            serve.delete(rs.app)

    def tell_router(self, sets: dict[str, str] | None = None) -> None:
        """The router's user_config: which set serves each packed model (``sets``; default: this engine's own),
        which applications are scaled to 0 workers, ``idle``, and which are ``starting`` (a lightweight update: no
        restart)."""
        from ray import serve

        from msnb.templates.msnb_runtime.ray import app as ray_app

        sets = self.packing.routes() if sets is None else sets
        ingress_config = self.engine._ingress_config()
        router = ray_app.router({**ingress_config, "sets": sets, "idle": self.idle, "starting": self.starting})
        serve.run(router, name=ROUTER_APP, route_prefix="/")
        self.engine.routes_changed()

    def replica_states(self, app: str) -> dict[str, int]:
        """Serve's replica counts by state of model application ``app`` (a packed model's: its set's)."""
        from ray import serve

        from msnb.templates.msnb_runtime.ray.app import MODEL
        from msnb.templates.msnb_runtime.ray.multi_model_routes import MODELS

        packed = self.status_app(app)
        found = serve.status().applications.get(packed or app)
        return dict(found.deployments[MODELS if packed else MODEL].replica_states) if found else {}

    def wait_started(self, app: str, folder: Path, timeout_s: float = STARTED_S) -> dict[str, int]:
        """``app``'s replica counts once none is starting and at least ``folder``'s minWorkers run (or as they are
        after ``timeout_s``): Serve reads an application RUNNING once its deployment is healthy, which for a range of
        replicas (autoscaling) can be before the ones a scale asked for have started, and TorchServe's synchronous
        scale answers with every worker READY."""
        deadline, fewest = time.monotonic() + timeout_s, workers(folder)[0]
        while True:
            states = self.replica_states(app)
            started = states.get("RUNNING", 0) >= fewest and not any(states.get(s) for s in BRINGING_UP)
            if started or time.monotonic() > deadline:
                return states
            time.sleep(SERVE_POLL_S)

    def status_app(self, app: str) -> str | None:
        """The set application serving ``app`` (None: not packed)."""
        rs = self.packing.set_of(app)
        return rs.app if rs else None


def own_target(folder: Path, app: str, args: dict) -> Any:
    """The Serve RunTarget of a model served by an application of its own (the runtime's ray.app:model)."""
    from ray import serve

    from msnb.templates.msnb_runtime.ray import app as ray_app

    return serve.RunTarget(ray_app.model(args), name=app, route_prefix=own_route(folder, app))
