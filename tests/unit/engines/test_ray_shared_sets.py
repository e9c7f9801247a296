"""Replica sets on the shared Ray (msnb.engines.ray.shared_sets), without Ray: what each attached process writes, what
the owner merges into its router, and when a process sees its models routed."""

from __future__ import annotations

import json

from msnb.engines.ray.shared import USERS
from msnb.engines.ray.shared_sets import SETS_FILE, routed, sets_of, user_sets


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
