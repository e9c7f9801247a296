"""Own TorchServe handlers using the worker's Context, served on the kernel's Ray as on a plain TorchServe: a
PredictionException's status, intermediate responses streamed, the customized describe, a stateful sequence kept
on one of two replicas; and a model that does not fit in the Ray's CPUs refused at once."""

from __future__ import annotations

import json
import threading

import pytest
import requests
from ts_context_handlers import (
    DESCRIBED,
    DESCRIBES,
    PREDICTION_ERROR,
    RAISES_513,
    STATEFUL,
    STATEFUL_CONFIG,
    STREAMS_WORDS,
    running_totals,
    words,
)

from msnb.capture.cells import capture
from msnb.engines.models import RawRequest
from msnb.engines.torchserve import LocalServer
from msnb.errors import ServerError
from msnb.session.deployment import deploy

HANDLERS = {"pe": RAISES_513, "words": STREAMS_WORDS, "desc": DESCRIBES}


def post(engine, name: str, body: dict) -> tuple[int, list[bytes]]:
    """A prediction with the engine's key, read as a client reads a streamed answer: its pieces as they come."""
    resp = engine.client.call("POST", f"{engine.inference_url}/predictions/{name}", "inference", json=body, stream=True)
    return resp.status_code, [piece for piece in resp.iter_content(None) if piece]


def test_a_status_of_its_own_streamed_chunks_and_describe_answer_on_ray_as_on_torchserve(ray_engine, tmp_path):
    with LocalServer(tmp_path / "ts") as torchserve:
        for name, source in HANDLERS.items():
            for engine in (torchserve, ray_engine):
                deploy(engine, capture(name, source, []))
        ts_status, ts_body = post(torchserve, "pe", {"x": 1})
        ray_status, ray_body = post(ray_engine, "pe", {"x": 1})
        assert (ray_status, json.loads(b"".join(ray_body))) == (ts_status, json.loads(b"".join(ts_body)))
        assert (ray_status, json.loads(b"".join(ray_body))) == (513, PREDICTION_ERROR)

        text = "the cat sat on the mat"
        ts_status, ts_pieces = post(torchserve, "words", {"text": text})
        ray_status, ray_pieces = post(ray_engine, "words", {"text": text})
        assert ts_status == ray_status == 200
        assert b"".join(ray_pieces) == b"".join(ts_pieces) == b"".join(words(text))
        assert len(ray_pieces) > 1  # it arrived in pieces, not as one whole answer

        ts_described = torchserve.client.call(
            "GET", f"{torchserve.client.management_url}/models/desc?customized=true", "management"
        ).json()
        ray_described = ray_engine.client.call(
            "GET", f"{ray_engine.inference_url}/models/desc?customized=true", "inference"
        ).json()
        assert ray_described[0]["customizedMetadata"] == ts_described[0]["customizedMetadata"] == DESCRIBED
        assert ray_described[0]["modelName"] == ts_described[0]["modelName"] == "desc"
    keyless = requests.get(f"{ray_engine.inference_url}/models/desc?customized=true", timeout=30)
    assert (keyless.status_code, keyless.json()["type"]) == (400, "InvalidKeyException")
    missing = ray_engine.client.call("GET", f"{ray_engine.inference_url}/models/nope", "inference")
    assert (missing.status_code, missing.json()["type"]) == (404, "ModelNotFoundException")


def test_each_sequence_of_a_stateful_model_stays_on_one_of_its_two_replicas(ray_engine):
    deploy(ray_engine, capture("seq", STATEFUL, [], model_yaml=STATEFUL_CONFIG, workers=2))
    assert len(ray_engine.status("seq").workers) == 2
    values = {f"seq-{n}": [n + 1, 2 * n + 1, 3, n + 5, 7] for n in range(4)}
    got: dict[str, list] = {}

    def send(sequence: str) -> None:  # one client per sequence, its requests one after another
        got[sequence] = [
            ray_engine.predict(
                "seq",
                RawRequest(json.dumps({"x": x}).encode(), "application/json", {"ts_request_sequence_id": sequence}),
            )
            for x in values[sequence]
        ]

    threads = [threading.Thread(target=send, args=(sequence,)) for sequence in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert got == {sequence: running_totals(xs) for sequence, xs in values.items()}


def test_more_models_than_the_old_four_are_served_and_one_that_cannot_fit_is_refused_at_once(ray_engine):
    for n in range(5):
        deploy(
            ray_engine, capture(f"one{n}", f"def handle(data, context):\n    return data and [{n}] * len(data)\n", [])
        )
    assert [ray_engine.predict(f"one{n}", {"x": 1}) for n in range(5)] == list(range(5))
    with pytest.raises(ServerError) as refused:
        deploy(
            ray_engine,
            capture("wide", "def handle(data, context):\n    return data and [1] * len(data)\n", [], workers=40),
        )
    assert "40 replica(s) need 4" in str(refused.value) and "Hint:" in str(refused.value)
    assert "wide" not in [status.name for status in ray_engine.models()]
    ray_engine.unregister("one0")  # as LocalServer.unregister: that application and its folder go, the others stay
    with pytest.raises(ServerError, match="No model 'one0' is served at"):
        ray_engine.predict("one0", {"x": 1})
    assert [status.name for status in ray_engine.models()] == [f"one{n}" for n in range(1, 5)]
    assert ray_engine.predict("one1", {"x": 1}) == 1
