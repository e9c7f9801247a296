"""TorchServe's Context features on the Ray adapter without a cluster: an own handler's PredictionException status,
its intermediate responses as streamed chunks, its customized describe, and the sequence router's choice."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections import Counter

import pytest
from ts_context_handlers import (
    DESCRIBED,
    DESCRIBES,
    PREDICTION_ERROR,
    RAISES_513,
    STATEFUL,
    STATEFUL_CONFIG,
    STREAMS_WORDS,
    words,
)

from msnb.capture.cells import capture
from msnb.package import archive

pytest.importorskip("ray.serve")
from ray.serve.request_router import PendingRequest

from msnb.templates.msnb_runtime.ray import app as ray_app
from msnb.templates.msnb_runtime.ray.sequences import SEQUENCE_HEADER, SequenceRouter, replica_for, sequence_of
from msnb.templates.msnb_runtime.ray.streaming import CHUNK, answer_whole, stream_batch, streams


@pytest.fixture
def own(tmp_path, monkeypatch):
    """An own handler cell's model folder loaded as a replica loads it, its modules forgotten after."""
    before = set(sys.modules)

    def load(name, source, **config):
        folder = archive.build(capture(name, source, [], **config), tmp_path / name, fmt="no-archive")
        monkeypatch.chdir(folder)
        monkeypatch.syspath_prepend(str(folder))
        return ray_app.LoadedModel(folder)

    yield load
    for name in set(sys.modules) - before:
        if name == "handler_model" or name.startswith("msnb_"):
            del sys.modules[name]


def request(body: dict, **headers: str):
    return False, json.dumps(body).encode(), {"content-type": "application/json", **headers}


def test_a_prediction_exception_answers_every_request_with_its_status_and_message_as_torchserve(own):
    model = own("pe", RAISES_513)
    replies = model.answer([request({"x": 1}), request({"x": 2})])
    assert [status for status, _, _ in replies] == [513, 513]
    assert all(json.loads(body) == PREDICTION_ERROR for _, _, body in replies)


def test_intermediate_responses_stream_as_chunks_and_a_whole_answer_joins_them(own):
    model = own("words", STREAMS_WORDS)
    assert streams(model)  # the router streams it from the first request
    [(status, headers, body)] = answer_whole(model, [request({"text": "the cat sat"})])
    assert (status, body) == (200, b"".join(words("the cat sat")))

    async def chunks():
        items = []
        async for step in stream_batch(model, [(*request({"text": "a dog ran far"}), threading.Event())]):
            items += [item for item in step if item not in (None, StopIteration)]
        return items

    items = asyncio.run(chunks())
    assert all(item[0] == CHUNK for item in items)
    assert [piece for item in items for piece in item[3]] == words("a dog ran far")


def test_describe_answers_the_handlers_describe_handle_as_torchserves_customized_metadata(own):
    model = own("desc", DESCRIBES)
    status, _, body = model.describe(True, {})
    [entry] = json.loads(body)
    assert status == 200 and entry["customizedMetadata"] == DESCRIBED
    assert (entry["modelName"], entry["batchSize"], entry["minWorkers"]) == ("desc", 1, 1)
    assert "customizedMetadata" not in json.loads(model.describe(False, {})[2])[0]
    [(status, _, body)] = model.answer([request({"x": 12})])  # predictions after a describe are unchanged
    assert (status, json.loads(body)) == (200, len(str({"x": 12})))


def test_describe_of_a_handler_raising_a_prediction_exception_is_its_status(own):
    status, _, body = own("pe2", RAISES_513).describe(True, {})
    assert (status, json.loads(body)) == (513, PREDICTION_ERROR)


def test_a_stateful_model_gets_the_sequence_router_and_the_context_its_sequence_ids(own):
    model = own("seq", STATEFUL, model_yaml=STATEFUL_CONFIG, workers=2)
    options = ray_app.deployment_options(model.config, [])
    assert options["request_router_config"].request_router_class.endswith("SequenceRouter")
    assert options["num_replicas"] == 2
    assert "request_router_config" not in ray_app.deployment_options({"minWorkers": 2}, [])
    replies = model.answer([request({"x": 3}, **{SEQUENCE_HEADER: "a"}), request({"x": 4}, **{SEQUENCE_HEADER: "b"})])
    replies += model.answer([request({"x": 5}, **{SEQUENCE_HEADER: "a"})])
    assert [json.loads(body) for _, _, body in replies] == [3, 4, 8]


class Replica:
    """What the sequence router reads of a replica: its id."""

    def __init__(self, unique_id: str):
        self.replica_id = type("ReplicaID", (), {"unique_id": unique_id})()


def test_a_sequence_always_goes_to_one_replica_and_sequences_spread_over_replicas():
    replicas = [Replica(f"r{i}") for i in range(3)]
    router = SequenceRouter.__new__(SequenceRouter)  # choose_replicas reads nothing of the router's state

    async def route(args: list) -> tuple:  # (a PendingRequest holds a future: made in a running loop)
        pending = PendingRequest(args=args, kwargs={}, metadata=None)
        return sequence_of(pending), (await router.choose_replicas(replicas, pending))[0]

    sequence, [chosen] = asyncio.run(route([False, b"{}", {SEQUENCE_HEADER: "seq-7"}]))
    assert sequence == "seq-7" and chosen is replica_for("seq-7", replicas)
    assert {asyncio.run(route([b"{}", {SEQUENCE_HEADER: "seq-7"}]))[1][0] for _ in range(20)} == {chosen}
    sequence, anyone = asyncio.run(route([b"{}", {"content-type": "x"}]))
    assert sequence is None and len(anyone) == 2  # no sequence: the less busy of two, as Serve's default
    spread = Counter(replica_for(f"s{i}", replicas).replica_id.unique_id for i in range(300))
    assert set(spread) == {"r0", "r1", "r2"} and min(spread.values()) > 50
    # a replica leaving moves only its own sequences
    kept = [r for r in replicas if r.replica_id.unique_id != "r2"]
    moved = [i for i in range(300) if replica_for(f"s{i}", replicas) is not replica_for(f"s{i}", kept)]
    assert all(replica_for(f"s{i}", replicas).replica_id.unique_id == "r2" for i in moved)
