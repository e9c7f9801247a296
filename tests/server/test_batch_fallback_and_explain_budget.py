"""On a real TorchServe: the batches the server formed are counted by size, and a batch fallback is counted, both
shown in status, the fallback logged; explanations over their share of
the worker are refused at once (503 + Retry-After) while predictions are answered."""

from __future__ import annotations

import json
import threading

import pytest
import requests
from helpers import BATCH_BUG_INPUTS, BATCH_ONLY_BUG, MLP_SOURCE, mlp_model, notebook_answer, poll

from msnb.engines.torchserve import LocalServer
from msnb.session.core import Session
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.explain_budget import SHARE_ENV
from msnb.trial.batches import BatchFallbackWarning
from msnb.ui.display import Status

pytestmark = pytest.mark.server

INPUTS = BATCH_BUG_INPUTS


@pytest.mark.timeout(300)
def test_a_forward_that_breaks_on_a_batch_is_counted_in_status_and_its_traceback_logged(tmp_path):
    spec = spec_from_source(
        "batchbug", BATCH_ONLY_BUG, init_kwargs={"hidden": 8}, batch_size=4, max_batch_delay=300, example=INPUTS[0]
    )
    session = Session(lambda engine, port: LocalServer(tmp_path / "ts"))
    session.add(spec)
    try:
        with pytest.warns(BatchFallbackWarning, match="mat1 and mat2 shapes cannot be multiplied"):
            session.test("batchbug")  # the example is tested as a batch of two as well
        server = session.serve("batchbug")

        def fell_back():  # concurrent requests, until the server has batched some of them
            assert server.predict_many("batchbug", INPUTS) == [notebook_answer(mlp_model(), x["x"]) for x in INPUTS]
            return session.status()["handlers"]["batchbug"]["batch_fallbacks"] and session.status()

        status = poll(fell_back, 60, "a batch fallback counted on /metrics", log=lambda: session.logs("batchbug"))
        row = status["handlers"]["batchbug"]
        shown = Status(status).text()
        assert f"{row['batch_fallbacks']} batch fallback" in shown and "(see %ms_logs)" in shown
        formed = {int(size): n for size, n in row["batches"].items()}  # the batches TorchServe formed, by size
        assert all(1 <= size <= 4 for size in formed) and any(size > 1 for size in formed), formed
        assert "batches formed: size " in session.batching("batchbug")
        logs = session.logs("batchbug", 400)
        assert "the batched forward of" in logs and "retrying one sample at a time, batching is lost" in logs
        assert "Traceback (most recent call last)" in logs and "mat1 and mat2 shapes cannot be multiplied" in logs
    finally:
        session.stop()


@pytest.mark.timeout(300)
def test_explanations_over_their_share_get_503_with_retry_after_while_predictions_are_answered(tmp_path):
    spec = spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8})
    # A small share, so that the tiny model's explanations (a few ms each, no more than the HTTP round trip
    # around them on a loaded machine) spend the burst credit well within the 240 requests below.
    with LocalServer(tmp_path / "ts", env={SHARE_ENV: "0.02"}) as server:
        deploy(server, spec)
        key = json.loads(server.layout.key_file.read_text())["inference"]["key"]
        headers = {"Authorization": f"Bearer {key}"}
        explained: list[requests.Response] = []

        def explain_client() -> None:  # a client that does not wait as asked: every request counts
            with requests.Session() as http:
                for _ in range(40):  # past the burst credit (msnb_runtime.handler.explain_budget.BURST_S), then paced
                    explained.append(
                        http.post(f"{server.inference_url}/explanations/mlp", json=INPUTS[0], headers=headers)
                    )

        clients = [threading.Thread(target=explain_client) for _ in range(6)]
        for client in clients:
            client.start()
        predictions = [server.predict("mlp", sample) for sample in INPUTS * 5]
        for client in clients:
            client.join(120)
    assert predictions == [notebook_answer(mlp_model(), x["x"]) for x in INPUTS * 5]
    refused = [r for r in explained if r.status_code == 503]
    assert refused and any(r.status_code == 200 for r in explained)
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    body = refused[0].json()
    assert body["stage"] == "explain" and "explanation budget" in body["error"] and "Retry-After" in body["hint"]
