"""Replica sets on the shared Ray (`msnb ray up`): the owner's standing set, which every attached process's models
join while it has room, and each process's own sets beyond it; the owner, whose router every process shares, routes
them all.

The standing set (``SHARED_SET``) is started with no members when the shared Ray comes up, so its replica has imported
torch and TorchServe before any model comes: a model a process serves later loads into that running process. The
owner is its one writer: each process lists its members (their entries, each naming the process's own inference
key, so no other process's key opens them) in ``users/PID/SHARED_FILE``, and the owner deploys the live processes'
entries as the set's user_config (``StandingSet.update``, each time it looks for users that are gone: a dead
process's members leave with its folder). Beyond K members, counted over every process, a process packs into sets
of its own (named by its pid), as a process on a Ray of its own does.

A process cannot rewrite the router itself (its user_config holds the owner's key and ingress config, and every
process's sets): it writes which set serves each of its packed models to ``users/PID/SETS_FILE``; the owner merges
the live processes' files into its router's user_config (``route_users``); the process waits until the router lists
its models' routes (``SharedSets.tell_router``). A set's replicas ask for the process's own inference key, as its
one-model applications do.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from msnb.engines.ray.packing import SET_PREFIX, ReplicaSet, workers
from msnb.engines.ray.replica_sets import ReplicaSets
from msnb.errors import ServerError
from msnb.files import write_atomic

SETS_FILE = "sets.json"  # users/PID/sets.json: model application -> the set that serves it
SHARED_FILE = "shared_set.json"  # users/PID/shared_set.json: the process's members of the standing set (entries)
SHARED_SET = f"{SET_PREFIX}shared"  # the standing set's application
SHARED_WORKERS = (1, 1)  # its replicas: one (the workers of a model-config that names none)
ROUTE_WAIT_S = 60.0  # the owner looks five times a second (shared.WATCH_S); its router's update takes a few more
ROUTE_HINT = (
    "the shared Ray's owner routes replica sets; one started by an older msnb does not: `msnb ray down`, then "
    "`msnb ray up` again (or serve with --models-per-replica 1: a replica per model, which it routes)."
)


class SharedSets(ReplicaSets):
    """One attached process's replica sets (``engine``: its SharedRay): its members of the standing set told the
    owner through ``SHARED_FILE``, its own sets deployed by itself, and the owner's router told through the
    process's sets file."""

    def __init__(self, engine: Any, packing: Any, failure: Any):
        super().__init__(engine, packing, failure)
        self._told: dict[str, str] = {}
        self._standing: int | None = None  # the owner whose standing set was found deployed (it stays while it runs)

    def place(self, app: str, entry: dict, folder: Path) -> tuple[ReplicaSet, bool]:
        """The standing set while it has room and the model's workers are its (the model loads into its running
        replica), with this process's key; else a set of this process's own (packing's rule)."""
        current = self.packing.set_of(app)
        if current is None:
            joins = workers(folder) == SHARED_WORKERS and self.room()
        else:
            joins = current.shared  # (a model whose workers changed has left its set: replace)
        if joins:
            shared = self.packing.sets.setdefault(SHARED_SET, ReplicaSet(SHARED_SET, SHARED_WORKERS, shared=True))
            shared.members[app] = {**entry, "key_file": str(self.engine.key_file)}
            return shared, False
        return super().place(app, entry, folder)

    def room(self) -> bool:
        """Whether the standing set runs (an owner of an older msnb starts none) with fewer than K members, every
        process's counted."""
        from ray import serve

        owner = self.engine.shared.owner  # (a process attached again may find another owner, of an older msnb)
        if self._standing != owner:
            if SHARED_SET not in serve.status().applications:
                return False
            self._standing = owner
        mine = self.packing.sets.get(SHARED_SET)
        others = shared_members(self.engine.root.parent, but=self.engine.root.name)
        return len(others) + len(mine.members if mine else ()) < self.packing.models_per_replica

    def set_targets(self, joined: dict[str, Path]) -> list[Any]:
        """The owner told this process's standing-set members (it deploys them); the RunTargets of its own sets."""
        self.tell_owner()
        return super().set_targets({app: f for app, f in joined.items() if not self.packing.set_of(app).shared})

    def run_set(self, rs: ReplicaSet, wait: bool = True) -> None:
        """As ReplicaSets.run_set; the standing set's members told the owner (it deploys them)."""
        if rs.shared:
            self.tell_owner()
        else:
            super().run_set(rs, wait)

    def release(self, rs: ReplicaSet) -> None:
        """As ReplicaSets.release; the standing set's members told the owner (it stays up without them)."""
        if rs.shared:
            self.tell_owner()
        else:
            super().release(rs)

    def tell_owner(self) -> None:
        """Write this process's standing-set members (``SHARED_FILE``): the owner deploys them."""
        mine = self.packing.sets.get(SHARED_SET)
        write_atomic(self.engine.root / SHARED_FILE, json.dumps(list(mine.members.values()) if mine else []))

    def loaded(self, set_app: str) -> dict:
        """As ReplicaSets.loaded; the standing set's replica asked with the shared Ray's own key (the set's)."""
        from msnb.templates.msnb_runtime.ray.multi_model_routes import LOADED_PATH, set_route

        if set_app != SHARED_SET:
            return super().loaded(set_app)
        return self.owner_get(f"{set_route(SHARED_SET)}{LOADED_PATH}") or {}

    def tell_router(self, sets: dict[str, str] | None = None) -> None:
        """Write this process's sets, then wait until the router lists each packed model's route and no longer lists
        a model that left (a ServerError with a Hint when the owner does not route them)."""
        from msnb.engines.ray.ingress import REFRESH_S

        mine = self.packing.routes() if sets is None else sets
        write_atomic(self.engine.root / SETS_FILE, json.dumps(mine))
        gone = set(self._told) - set(mine)
        deadline = time.monotonic() + ROUTE_WAIT_S
        while not routed(self.targets(), mine, gone):
            if time.monotonic() > deadline:
                raise ServerError(
                    f"The shared Ray did not route {', '.join(sorted(mine) or sorted(gone))} to its replica set "
                    f"within {ROUTE_WAIT_S:g} s.",
                    ROUTE_HINT,
                )
            time.sleep(0.2)
        self._told = dict(mine)
        time.sleep(2 * REFRESH_S)  # the front reads the router's routes again every REFRESH_S: then it sends them

    def targets(self) -> dict[str, list[str]]:
        """The routes the router hands the front."""
        from msnb.templates.msnb_runtime.ray.ingress import TARGETS_PATH

        return self.owner_get(TARGETS_PATH) or {}

    def owner_get(self, path: str) -> Any:
        """GET ``path`` through the front with the shared Ray's own key: its JSON, or None (the router or a set's
        replica updating: ask again)."""
        from msnb.engines.ray.engine import KEY_FILE
        from msnb.templates.msnb_runtime.ts.checks import read_key

        key = read_key(Path(self.engine.shared.root) / KEY_FILE)
        request = urllib.request.Request(self.engine.inference_url + path, headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):
            return None


def routed(targets: dict[str, list[str]], mine: dict[str, str], gone: set[str]) -> bool:
    """Whether the router's ``targets`` send each of ``mine`` to its set and none of ``gone`` anywhere."""
    from msnb.templates.msnb_runtime.ray.multi_model_routes import app_route, set_route

    sent = all(any(set_route(s) in url for url in targets.get(app_route(app)) or ()) for app, s in mine.items())
    return sent and not any(app_route(app) in targets for app in gone)


def user_sets(users: Path) -> dict[str, str]:
    """Every attached process's packed models and their sets (``users``/PID/SETS_FILE), merged."""
    merged: dict[str, str] = {}
    for path in sorted(users.glob(f"*/{SETS_FILE}")):
        with contextlib.suppress(ValueError, OSError):
            merged |= {str(k): str(v) for k, v in json.loads(path.read_text()).items()}
    return merged


def route_users(engine: Any, users: Path, told: dict[str, str] | None) -> dict[str, str]:
    """The owner's part: its router told every process's sets (``users``: the folder of the processes' folders) when
    they changed since ``told``; what it was told."""
    sets = user_sets(users)
    if sets == told:
        return sets
    try:
        engine.sets.tell_router(sets)
    except Exception as err:  # (Serve busy): the owner says so in its log and tries again next time
        print(f"the router was not told the replica sets ({err}): trying again", flush=True)
        return told
    return sets


def sets_of(users: Path, pid: int) -> list[str]:
    """The set applications process ``pid`` deployed (from its sets file): taken off with its models (the standing
    set stays: the owner's)."""
    with contextlib.suppress(ValueError, OSError):
        return sorted(set(json.loads((users / str(pid) / SETS_FILE).read_text()).values()) - {SHARED_SET})
    return []


def shared_members(users: Path, but: str = "") -> dict[str, dict]:
    """Every attached process's standing-set members (``users``/PID/SHARED_FILE; ``but``: a PID left out), by
    model application, in the order of the processes' pids."""
    merged: dict[str, dict] = {}
    paths = sorted(users.glob(f"*/{SHARED_FILE}"), key=lambda p: (len(p.parent.name), p.parent.name))
    for path in paths:
        if path.parent.name == but:
            continue
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
            merged |= {str(entry["app"]): entry for entry in json.loads(path.read_text())}
    return merged


class StandingSet:
    """The owner's part: the standing set deployed with the live processes' members (``engine``: the owner's
    SharedOwner), started with none when the shared Ray comes up."""

    def __init__(self, engine: Any):
        self.engine, self.members = engine, None

    def update(self, users: Path) -> None:
        """Deploy the standing set when its members changed (a lightweight update: the running replica loads and
        unloads them in place); Serve busy: said in the owner's log, tried again next time."""
        members = shared_members(users)
        if members == self.members:
            return
        try:
            self.engine.sets.run_set(ReplicaSet(SHARED_SET, SHARED_WORKERS, members, shared=True), wait=False)
        except Exception as err:
            print(f"the standing replica set was not updated ({err}): trying again", flush=True)
            return
        self.members = members
