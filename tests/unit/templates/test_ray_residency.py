"""At most L of a replica set's models loaded in one replica (the runtime's ray.residency and ray.multi_model's
Members), without Ray: the least recently used idle model is evicted, a model with a request in flight never is, and
an evicted model's next requests wait for one load of it and are all answered."""

from __future__ import annotations

import asyncio

import pytest

from msnb.templates.msnb_runtime.ray.multi_model import Members
from msnb.templates.msnb_runtime.ray.multi_model_routes import MAX_LOADED
from msnb.templates.msnb_runtime.ray.residency import Residency, limit_of


def test_the_least_recently_used_idle_model_is_evicted_first():
    residency = Residency(limit=2)
    for app in ("a", "b", "c"):
        residency.loaded(app)
    assert residency.victims() == ["a"]
    residency.begin("a")  # a request of a: it is now the most recently used, and busy
    assert residency.victims() == ["b"]
    residency.end("a")
    residency.forget("b")
    assert residency.victims() == [] and residency.resident() == ["c", "a"]


def test_a_model_with_a_request_in_flight_is_never_evicted_and_the_limit_is_met_once_it_is_idle():
    residency = Residency(limit=1)
    residency.loaded("a")
    residency.begin("a")
    residency.begin("b")  # b's request waits for its load, a's is still answering
    residency.loaded("b")
    assert residency.victims() == []
    residency.end("a")
    assert residency.victims() == ["a"]
    residency.end("b")
    assert residency.busy("b") is False


def test_no_limit_evicts_nothing_and_the_limit_reads_as_the_user_config_gives_it():
    residency = Residency()
    for n in range(20):
        residency.loaded(f"m{n}")
    assert residency.victims() == []
    assert [limit_of(v) for v in (None, "", 0, "0", 3, "4")] == [None, None, None, None, 3, 4]
    with pytest.raises(ValueError, match="max_num_models_per_replica"):
        limit_of(-1)


class Slot:
    """A loaded model that answers its own name after a short while (long enough for other requests to arrive)."""

    def __init__(self, app: str):
        self.app, self.closed = app, False

    async def infer(self, x: int) -> tuple[str, int]:
        await asyncio.sleep(0.01)  # the answer takes time: other requests arrive meanwhile (not a synchronisation)
        assert not self.closed, f"{self.app} answered after it was evicted"
        return self.app, x * 2

    def close(self) -> None:
        self.closed = True


class Counting(Members):
    """Members whose load makes a Slot and counts each load (a thread, as TorchServe's loader runs)."""

    def load(self, app: str, spec: dict) -> None:
        if spec.get("broken"):
            self.failed[app] = (spec, "RuntimeError: it does not load")
            return
        self.slots[app], self.specs[app] = Slot(app), spec

    async def ask(self, app: str, x: int) -> tuple[str, int] | tuple:
        async with self.using(app) as slot:
            return await slot.infer(x) if slot else self.missing(app)[0:1]


def config(apps: list[str], limit: int | None, broken: tuple[str, ...] = ()) -> dict:
    return {"models": [{"app": a, "model_dir": f"/m/{a}", "broken": a in broken} for a in apps], MAX_LOADED: limit}


def test_each_member_loads_once_when_it_joins_and_at_most_l_stay_loaded():
    members = Counting()
    asyncio.run(members.reconfigure(config(["a", "b", "c", "d"], 2)))
    assert members.residency.resident() == ["c", "d"]
    assert {app: entry["loads"] for app, entry in members.loaded().items()} == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert [app for app, entry in members.loaded().items() if entry["resident"]] == ["c", "d"]


def test_evicted_models_answer_every_concurrent_request_after_waiting_for_their_load():
    members = Counting()

    async def scenario() -> list:
        await members.reconfigure(config(["a", "b", "c"], 1))
        asked = [(app, n) for n in range(10) for app in ("a", "b", "c")]
        return await asyncio.gather(*(members.ask(app, n) for app, n in asked))

    answers = asyncio.run(scenario())
    assert answers == [(app, n * 2) for n in range(10) for app in ("a", "b", "c")]  # none lost, none from another
    assert members.loads["a"] >= 2  # evicted when it joined and loaded again by its requests
    assert len(members.residency.resident()) == 1  # the limit met again once idle


def test_concurrent_requests_for_an_evicted_model_share_one_load():
    members = Counting()

    async def scenario() -> list:
        await members.reconfigure(config(["a", "b"], 1))  # a evicted when b joined
        return await asyncio.gather(*(members.ask("a", n) for n in range(8)))

    assert asyncio.run(scenario()) == [("a", n * 2) for n in range(8)]
    assert members.loads["a"] == 2


def test_a_member_that_does_not_load_answers_its_error_and_is_not_loaded_again():
    members = Counting()

    async def scenario() -> list:
        await members.reconfigure(config(["a", "bad"], 1, broken=("bad",)))
        return [await members.ask("bad", 1), await members.ask("a", 1), await members.ask("nope", 1)]

    assert asyncio.run(scenario()) == [(503,), ("a", 2), (404,)]
    assert members.loaded()["bad"]["error"] and members.loads["bad"] == 0
