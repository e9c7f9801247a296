"""Replica sets on the shared Ray (`msnb ray up`): each attached process packs its models into sets of its own, and
the owner, whose router every process shares, routes them.

A process cannot rewrite the router itself (its user_config holds the owner's key and ingress config, and every process's
sets): it writes which set serves each of its packed models to ``users/PID/SETS_FILE``; the owner merges the live
processes' files into its router's user_config (``route_users``, each time it looks for users that are gone); the
process waits until the router lists its models' routes (``SharedSets.tell_router``). A set's replicas ask for the
process's own inference key, as its one-model applications do.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from msnb.engines.ray.replica_sets import ReplicaSets
from msnb.errors import ServerError
from msnb.files import write_atomic

SETS_FILE = "sets.json"  # users/PID/sets.json: model application -> the set that serves it
ROUTE_WAIT_S = 60.0  # the owner looks every second (shared.REAP_S); its router's update takes a few more
ROUTE_HINT = (
    "the shared Ray's owner routes replica sets; one started by an older msnb does not: `msnb ray down`, then "
    "`msnb ray up` again (or serve with --models-per-replica 1: a replica per model, which it routes)."
)


class SharedSets(ReplicaSets):
    """One attached process's replica sets (``engine``: its SharedRay): the owner's router told through the process's
    sets file."""

    def __init__(self, engine: Any, packing: Any, failure: Any):
        super().__init__(engine, packing, failure)
        self._told: dict[str, str] = {}

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
        """The routes the router hands the front (asked through the front with the shared Ray's own key)."""
        from msnb.engines.ray.engine import KEY_FILE
        from msnb.templates.msnb_runtime.ray.ingress import TARGETS_PATH
        from msnb.templates.msnb_runtime.ts.checks import read_key

        key = read_key(Path(self.engine.shared.root) / KEY_FILE)
        request = urllib.request.Request(
            self.engine.inference_url + TARGETS_PATH, headers={"Authorization": f"Bearer {key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):  # the router updating: ask again
            return {}


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
    """The set applications process ``pid`` deployed (from its sets file): taken off with its models."""
    with contextlib.suppress(ValueError, OSError):
        return sorted(set(json.loads((users / str(pid) / SETS_FILE).read_text()).values()))
    return []
