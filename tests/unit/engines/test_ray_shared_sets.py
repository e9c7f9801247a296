"""Replica sets on the shared Ray (msnb.engines.ray.shared_sets), without Ray: what each attached process writes, what
the owner merges into its router and its standing set, when a process sees its models routed, and which set a model
joins."""

from __future__ import annotations

import json

from test_ray_packing import folder

from msnb.engines.ray.packing import Packing
from msnb.engines.ray.shared import USERS
from msnb.engines.ray.shared_sets import (
    SETS_FILE,
    SHARED_FILE,
    SHARED_SET,
    SharedSets,
    routed,
    sets_of,
    shared_members,
    user_sets,
)


def write(root, pid: int, sets: dict) -> None:
    (root / USERS / str(pid)).mkdir(parents=True)
    (root / USERS / str(pid) / SETS_FILE).write_text(json.dumps(sets))


def test_the_owner_merges_every_process_sets_and_a_process_sets_are_its_own(tmp_path):
    write(tmp_path, 11, {"a": "msnb-models-11-1", "b": "msnb-models-11-1"})
    write(tmp_path, 22, {"c": "msnb-models-22-1"})
    (tmp_path / USERS / "33").mkdir()  # a process that packs nothing
    (tmp_path / USERS / "44").mkdir()
    (tmp_path / USERS / "44" / SETS_FILE).write_text("{half")  # a file being written: skipped this time
    assert user_sets(tmp_path / USERS) == {"a": "msnb-models-11-1", "b": "msnb-models-11-1", "c": "msnb-models-22-1"}
    users = tmp_path / USERS
    assert sets_of(users, 11) == ["msnb-models-11-1"] and sets_of(users, 33) == [] == sets_of(users, 44)


def test_a_process_sees_its_models_routed_once_each_goes_to_its_set_and_one_that_left_goes_nowhere():
    url = "http://127.0.0.1:5/-/msnb-sets/msnb-models-11-1"
    mine = {"a": "msnb-models-11-1"}
    assert routed({"/predictions/a": [url]}, mine, set())
    assert not routed({}, mine, set())  # the owner has not told its router yet
    assert not routed({"/predictions/a": ["http://127.0.0.1:6"]}, mine, set())  # still its own application's
    assert not routed({"/predictions/a": [url], "/predictions/b": [url]}, mine, {"b"})  # b left, still routed
    assert routed({"/predictions/a": [url]}, mine, {"b"})


def test_the_standing_set_s_members_are_every_process_entries_in_pid_order_and_only_the_owner_keeps_the_set(tmp_path):
    users = tmp_path / USERS
    for pid, apps in ((100, ["c"]), (99, ["a", "b"]), (7, [])):
        (users / str(pid)).mkdir(parents=True)
        entries = [{"app": app, "model_dir": f"/m/{app}", "key_file": f"/u/{pid}/key"} for app in apps]
        (users / str(pid) / SHARED_FILE).write_text(json.dumps(entries))
    (users / "8").mkdir()
    (users / "8" / SHARED_FILE).write_text('[{"model_dir": "/no/app"}]')  # not an entry: skipped, the rest merge
    merged = shared_members(users)
    assert list(merged) == ["a", "b", "c"] and merged["c"]["key_file"] == "/u/100/key"  # 99 before 100
    assert list(shared_members(users, but="99")) == ["c"]  # what the other processes hold
    (users / "99" / SETS_FILE).write_text(json.dumps({"a": SHARED_SET, "b": SHARED_SET, "x": "msnb-models-99-1"}))
    assert sets_of(users, 99) == ["msnb-models-99-1"]  # a dead process's own set goes, the standing set stays


class Attached:
    """What SharedSets reads of its SharedRay: its folder under the users' and its inference key."""

    def __init__(self, root):
        self.root, self.key_file = root, root / "key_file.json"


def test_a_model_joins_the_standing_set_with_its_process_key_while_it_has_room_else_a_set_of_its_own(
    tmp_path, monkeypatch
):
    sets = SharedSets(Attached(tmp_path / USERS / "5"), Packing(models_per_replica=2, prefix="msnb-models-5-"), None)
    room = iter([True, False])
    monkeypatch.setattr(SharedSets, "room", lambda self: next(room))
    one, two = folder(tmp_path, "one"), folder(tmp_path, "two", "minWorkers: 2\nmaxWorkers: 2\n")
    shared, new = sets.place("one", {"app": "one"}, one)
    assert (shared.app, new, shared.shared) == (SHARED_SET, False, True)  # up already: no replica to start
    assert shared.members["one"] == {"app": "one", "key_file": str(tmp_path / USERS / "5" / "key_file.json")}
    assert sets.place("three", {"app": "three"}, one)[0].app == "msnb-models-5-1"  # no room left: its own set
    assert sets.place("two", {"app": "two"}, two)[0].app == "msnb-models-5-2"  # two replicas: not the standing one's
    assert sets.place("one", {"app": "one", "v": 2}, one)[0] is shared  # a new folder of a member stays there
    assert sets.packing.place("four", {"app": "four"}, (1, 1))[0].app == "msnb-models-5-1"  # packing never joins it
