"""Which model folders share a Ray replica (msnb.engines.ray.packing), how the router reaches a packed model (the
runtime's ray.multi_model_routes) and where a scale moves one (msnb.engines.ray.replica_sets), without Ray: the rule
a user reads, in the order models are served."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msnb.engines.ray.packing import Packing, streams, workers
from msnb.templates.msnb_runtime.ray.multi_model_routes import (
    SetHandle,
    members_of,
    set_route,
    set_targets,
    strip_set_route,
)


def folder(root: Path, name: str, config: str = "", handler: str = "def handle(data, context):\n    return data\n"):
    path = root / name
    (path / "MAR-INF").mkdir(parents=True)
    manifest = {"model": {"modelName": name, "modelVersion": "1.0", "handler": "h.py", "configFile": "c.yaml"}}
    (path / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    (path / "c.yaml").write_text(config)
    (path / "h.py").write_text(handler)
    return path


def test_at_most_k_models_share_a_set_and_a_full_set_is_followed_by_a_new_one(tmp_path):
    packing = Packing(models_per_replica=2)
    placed = [packing.place(f"m{n}", {"app": f"m{n}"}, (1, 1)) for n in range(5)]
    assert [(rs.app, new) for rs, new in placed] == [
        ("msnb-models-1", True),
        ("msnb-models-1", False),
        ("msnb-models-2", True),
        ("msnb-models-2", False),
        ("msnb-models-3", True),
    ]
    assert packing.routes() == {
        "m0": "msnb-models-1",
        "m1": "msnb-models-1",
        "m2": "msnb-models-2",
        "m3": "msnb-models-2",
        "m4": "msnb-models-3",
    }


def test_a_model_no_new_set_has_room_for_joins_the_smallest_set_of_its_workers_beyond_k():
    packing = Packing(models_per_replica=1, loaded_per_replica=None)
    first, _ = packing.place("a", {"app": "a"}, (1, 1))
    packing.place("b", {"app": "b"}, (1, 1))
    packing.place("c", {"app": "c"}, (1, 1))  # its new set cannot start (Ray's CPUs are taken)
    assert packing.overflow("c", {"app": "c"}, (1, 1)) is first and list(first.members) == ["a", "c"]
    assert len(packing.sets) == 2 and packing.loaded_per_replica == 1  # the set keeps K loaded (L defaults to K)
    packing.place("d", {"app": "d"}, (2, 2))
    assert packing.overflow("d", {"app": "d"}, (2, 2)) is None and packing.set_of("d") is None  # no set of its workers
    assert Packing(models_per_replica=8, loaded_per_replica=3).loaded_per_replica == 3


def test_models_of_other_workers_go_to_another_set_and_a_set_goes_with_its_last_member():
    packing = Packing()
    one, _ = packing.place("a", {"app": "a"}, (1, 1))
    two, new = packing.place("b", {"app": "b"}, (2, 2))
    assert new and one is not two
    assert packing.remove("b") is two and two.app not in packing.sets and packing.set_of("a") is one
    assert packing.remove("nope") is None


@pytest.mark.parametrize(
    ("config", "handler", "extra", "why"),
    [
        ("deviceType: gpu\n", None, {}, "it asks for a GPU"),
        ("sequenceBatching: true\n", None, {}, "it is stateful (sequenceBatching)"),
        ("", "def handle(d, c):\n    send_intermediate_predict_response(['x'], [0], 'ok', 200, c)\n", {}, "it streams"),
        ("", None, {"requirements": ["numpy"]}, "Ray installs its requirements per replica (runtime_env)"),
    ],
)
def test_a_model_that_cannot_share_a_process_gets_a_replica_of_its_own(tmp_path, config, handler, extra, why):
    path = folder(tmp_path, "m", config, *([handler] if handler else []))
    assert Packing().own_replica(path, "m", extra).startswith(why)


def test_a_model_named_or_every_model_with_k_of_one_gets_its_own_and_the_rest_share(tmp_path):
    path = folder(tmp_path, "m", "minWorkers: 2\nmaxWorkers: 3\n")
    assert Packing(own=("m",)).own_replica(path, "m", {}) == "--own-replica"
    assert Packing(models_per_replica=1).own_replica(path, "m", {}) == "--models-per-replica 1"
    assert Packing().own_replica(path, "m", {}) is None
    assert workers(path) == (2, 3) and not streams(path)


def test_the_router_sends_a_packed_models_routes_to_its_sets_replicas_with_the_sets_prefix():
    groups = {"/": ["http://r:1"], set_route("msnb-models-1"): ["http://a:2", "http://b:3"]}
    routes = set_targets(groups, {"m": "msnb-models-1", "m@2.0": "msnb-models-1", "gone": "msnb-models-9"})
    assert routes["/predictions/m"] == ["http://a:2/-/msnb-sets/msnb-models-1", "http://b:3/-/msnb-sets/msnb-models-1"]
    assert routes["/predictions/m/2.0"] == routes["/predictions/m"] and "/predictions/gone" not in routes
    assert strip_set_route("/-/msnb-sets/msnb-models-1/predictions/m/-/v1/x") == "/predictions/m/-/v1/x"
    assert strip_set_route("/predictions/m") == "/predictions/m"


def test_a_sets_replica_states_are_each_members_and_a_set_handle_names_its_model():
    states = {"own": {"RUNNING": 1}, "msnb-models-1": {"RUNNING": 2}}
    assert members_of(states, {"a": "msnb-models-1", "b": "msnb-models-1"}) == {
        "own": {"RUNNING": 1},
        "a": {"RUNNING": 2},
        "b": {"RUNNING": 2},
    }

    class Method:
        def remote(self, *args):
            return args

    class Handle:
        infer = Method()

        def options(self, **kwargs):
            return self

    assert SetHandle(Handle(), "a").options(stream=True).infer.remote(False, b"{}", {}) == ("a", False, b"{}", {})


def test_a_packed_model_scaled_to_a_range_moves_to_a_new_set_that_starts_from_the_replicas_it_runs(
    tmp_path, monkeypatch
):
    from msnb.engines.ray.replica_sets import ReplicaSets
    from msnb.templates.msnb_runtime.ray import multi_model

    monkeypatch.setattr(multi_model.needs, "check", lambda name, options: None)  # no cluster to place it on

    class Engine:  # what ReplicaSets reads of a LocalRay; its deploy plans each folder as LocalRay.deploy_many does
        replica_cpus = 1.0

        def _ingress_config(self):
            return {"key": "k"}

        def routes_changed(self):  # (no front to tell)
            pass

        def deploy_many(self, models):
            for path, extra in models:
                rs, _ = sets.join(path, extra["app"], {"name": "m", **extra})
                yield extra["app"], sets.target(rs).target

    def scaling(application):
        config = application._bound_deployment._deployment_config.autoscaling_config
        return config.min_replicas, config.initial_replicas, config.max_replicas

    sets, released = ReplicaSets(Engine(), Packing(), failure=None), []
    sets.join(folder(tmp_path, "m", "minWorkers: 2\nmaxWorkers: 2\n"), "m", {"name": "m"})
    monkeypatch.setattr(sets, "release", released.append)  # its old set's replicas let go of it
    moved = sets.replace(folder(tmp_path / "v2", "m", "minWorkers: 1\nmaxWorkers: 3\n"), "m", running=2)
    assert scaling(moved) == (1, 2, 3)  # TorchServe keeps its 2 workers within 1..3
    assert [rs.workers for rs in released] == [(2, 2)] and sets.packing.set_of("m").workers == (1, 3)
    sets.join(folder(tmp_path, "n", "minWorkers: 1\nmaxWorkers: 3\n"), "n", {"name": "n", "running": 3})
    assert sets.packing.set_of("n") is sets.packing.set_of("m") and sets.packing.set_of("m").running == 2  # joined
    wider = sets.replace(folder(tmp_path / "v3", "m", "minWorkers: 1\nmaxWorkers: 4\n"), "m", running=9)
    assert scaling(wider) == (1, 4, 4)  # kept within the range
    assert scaling(sets.replace(folder(tmp_path / "v4", "m", "minWorkers: 2\nmaxWorkers: 5\n"), "m")) == (2, None, 5)


def test_a_redeploy_waits_until_none_of_its_replicas_is_starting_and_min_workers_run(tmp_path, monkeypatch):
    from msnb.engines.ray.replica_sets import ReplicaSets

    sets = ReplicaSets(engine=None, packing=Packing(), failure=None)

    def waited(config: str, *states: dict, timeout_s: float = 30) -> tuple[dict, int]:
        """What wait_started returned, and how many times it read Serve's states, as Serve says ``states``."""
        seen, reads, where = iter(states), [], tmp_path / str(len(list(tmp_path.iterdir())))
        monkeypatch.setattr(sets, "replica_states", lambda app: reads.append(app) or next(seen, states[-1]))
        return sets.wait_started("m", folder(where, "m", config), timeout_s), len(reads)

    # Serve's application read RUNNING while a scale to 2 workers still started its second replica
    two = "minWorkers: 2\nmaxWorkers: 2\n"
    assert waited(two, {"RUNNING": 1, "STARTING": 1}, {"RUNNING": 1}, {"RUNNING": 2}) == ({"RUNNING": 2}, 3)
    # a range (autoscaling) of 1..3: one more replica starting is waited for, a draining one is not
    some = "minWorkers: 1\nmaxWorkers: 3\n"
    assert waited(some, {"RUNNING": 1, "STARTING": 1}, {"RUNNING": 2, "STOPPING": 1}) == (
        {"RUNNING": 2, "STOPPING": 1},
        2,
    )
    # bounded: what Serve says after the wait, never an endless loop
    got, reads = waited(two, {"RUNNING": 1, "STARTING": 1}, timeout_s=0.3)
    assert got == {"RUNNING": 1, "STARTING": 1} and reads > 1
