"""The spine end to end: a HandlerSpec built into a .mar answers on a real TorchServe like in-process."""

from __future__ import annotations

import pytest
from helpers import MLP_SOURCE, mlp_model, notebook_answer, poll

from msnb.engines.torchserve import LocalServer, PredictionError
from msnb.package import archive
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.metrics import BATCHES_METRIC, SIZE_DIMENSION, WINDOW_METRICS
from msnb.trial.runner import run_handler

UNSERIALISABLE = (
    "import torch\n\n"
    "def init_function():\n"
    "    return torch.nn.Identity()\n\n"
    "def preprocess(sample):\n"
    "    return torch.tensor(sample, dtype=torch.float32)\n\n"
    "def postprocess(output):\n"
    "    return object() if output[0] < 0 else output\n"
)
# Every sample answers with the size of the forward pass it was part of.
BATCH_PROBE = (
    "import torch\n\n"
    "class BatchProbe(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.full((x.shape[0],), x.shape[0])\n\n"
    "def init_function():\n"
    "    return BatchProbe()\n\n"
    "def preprocess(sample):\n"
    "    return torch.tensor(float(sample))\n\n"
    "def postprocess(output):\n"
    "    return int(output)\n"
)
SAMPLES = [{"x": [float(i), float(-i), 0.5 * i, 1.0]} for i in range(8)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The MLP spec built as a standard .mar, served with batchSize 4 on one worker, and a batch-size probe."""
    spec = spec_from_source(
        "mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, batch_size=4, max_batch_delay=200, example=SAMPLES[0]
    )
    mar = archive.build(spec, tmp_path_factory.mktemp("store"), fmt="mar")
    with LocalServer(tmp_path_factory.mktemp("ts")) as server:
        server.register(mar)
        deploy(server, spec_from_source("probe", BATCH_PROBE, batch_size=4, max_batch_delay=200))
        yield spec, server


def test_eight_concurrent_requests_answer_like_the_notebook(served):
    _, server = served
    model = mlp_model()
    expected = [notebook_answer(model, sample["x"]) for sample in SAMPLES]
    answers = server.predict_many("mlp", SAMPLES)
    assert answers == expected
    assert server.status("mlp").batch_size == 4


def test_batched_requests_really_share_a_forward_pass(served):
    _, server = served
    sizes = server.predict_many("probe", list(range(8)))
    assert max(sizes) > 1, sizes
    for size in set(sizes):  # a forward of k samples answers k requests with k
        assert size <= 4 and sizes.count(size) % size == 0, sizes


def test_a_bad_sample_in_a_batch_fails_alone_with_its_own_message(served):
    _, server = served
    inputs = [SAMPLES[0], {"x": [1, 2]}, SAMPLES[1], {"nope": 1}]
    answers = server.predict_many("mlp", inputs, return_exceptions=True)
    assert answers[0] == notebook_answer(mlp_model(), SAMPLES[0]["x"])
    assert answers[2] == notebook_answer(mlp_model(), SAMPLES[1]["x"])
    for bad in (answers[1], answers[3]):
        assert isinstance(bad, PredictionError) and bad.status == 400
    assert "'x' must hold 4 numbers" in str(answers[1])
    assert "Hint:" in str(answers[1])


def test_non_serialisable_output_fails_that_request_with_a_hint(tmp_path):
    spec = spec_from_source("odd", UNSERIALISABLE, batch_size=4, max_batch_delay=200)
    inputs = [[1.0, 2.0], [-1.0, 2.0], [3.0, 4.0], [-5.0, 0.0]]
    with LocalServer(tmp_path / "ts") as server:
        deploy(server, spec)
        answers = server.predict_many("odd", inputs, return_exceptions=True)
    assert answers[0] == [1.0, 2.0] and answers[2] == [3.0, 4.0]
    for bad in (answers[1], answers[3]):
        assert isinstance(bad, PredictionError) and bad.status == 500
        assert "Hint:" in str(bad)
    assert [a.status for a in run_handler(spec, inputs)] == [200, 500, 200, 500]


def test_msnb_metrics_reach_the_prometheus_endpoint_after_traffic(served):
    """Stage times and batch sizes are on GET /metrics (what a cluster scrapes), not only in model_log.log."""
    spec, server = served
    server.predict_many("mlp", SAMPLES)

    # Prometheus names a counter NAME_total; the batches formed are one (mlp is served with batchSize 4).
    names = (*WINDOW_METRICS, f"{BATCHES_METRIC}_total")

    def msnb_metrics():
        found = {name: server.client.metrics().get(name, []) for name in names}
        return found if all(any(labels.get("ModelName") == "mlp" for labels, _ in s) for s in found.values()) else None

    found = poll(msnb_metrics, 30, "every msnb metric for mlp on /metrics", log=lambda: server.log_tail(40))
    batch_sizes = [value for labels, value in found["MsnbBatchSize"] if labels["ModelName"] == "mlp"]
    assert all(1 <= size <= 4 for size in batch_sizes)
    assert all(value >= 0 for samples in found.values() for _, value in samples)
    formed = [labels for labels, _ in found[f"{BATCHES_METRIC}_total"] if labels["ModelName"] == "mlp"]
    assert all(1 <= int(labels[SIZE_DIMENSION]) <= 4 for labels in formed)
