"""Explanations on a real TorchServe: POST /explanations reaches the shared handler's explain path."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from captum.attr import IntegratedGradients
from helpers import CUSTOM_EXPLAIN, MLP_SOURCE, TOKENS_SOURCE, mlp_model, notebook_answer, processes_naming

from msnb.engines.torchserve import LocalServer, PredictionError
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source

X = [0.5, -1.0, 2.0, 0.1]


@pytest.fixture(scope="module")
def explaining(tmp_path_factory):
    """One server for this module's read-only tests: the MLP (Integrated Gradients by default, batching up to 8
    requests within 500 ms), the MLP with a custom explain role, and a token-id model ("bag": TorchServe 0.12 refuses management calls on a model named "tokens")."""
    server = LocalServer(tmp_path_factory.mktemp("explain-server"))
    with server:
        deploy(server, spec_from_source("mlp", MLP_SOURCE, batch_size=8, max_batch_delay=500))
        deploy(server, spec_from_source("custom", CUSTOM_EXPLAIN))
        deploy(server, spec_from_source("bag", TOKENS_SOURCE))
        yield server
    assert not processes_naming(server.workdir)


def test_served_integrated_gradients_satisfy_completeness_and_equal_captum_s(explaining):
    answer = explaining.explain("mlp", {"x": X})
    model = mlp_model()
    with torch.no_grad():
        at_x, at_baseline = model(torch.tensor([X]))[0], model(torch.zeros(1, 4))[0]
    target = int(at_x.argmax())
    assert answer["target"] == target and answer["method"] == "integrated_gradients" and answer["n_steps"] == 50
    gap = float(at_x[target] - at_baseline[target])
    assert abs(sum(answer["attributions"]) - gap) <= abs(answer["delta"]) + 1e-5
    captum = IntegratedGradients(model).attribute(
        torch.tensor([X]), baselines=torch.zeros(1, 4), target=target, n_steps=50
    )
    assert answer["attributions"] == pytest.approx(captum[0].tolist(), abs=1e-5)


def test_the_custom_explain_role_answers_explanations_and_predictions_stay_predictions(explaining):
    answer = explaining.explain("custom", {"x": X, "target": 1})
    assert answer["custom"] is True and answer["target"] == 1 and len(answer["attributions"]) == 4
    assert set(explaining.predict("custom", {"x": X})) == {"label", "scores"}


def test_an_unexplainable_input_is_a_400_with_a_hint(explaining):
    with pytest.raises(PredictionError) as err:
        explaining.explain("bag", {"ids": [1, 4, 2]})
    assert err.value.status == 400
    assert "needs floating-point inputs" in err.value.message
    assert err.value.hint.startswith("define `def explain(model, model_input)`")
    assert len(explaining.predict("bag", {"ids": [1, 4, 2]})) == 3  # the same input predicts


def test_a_batch_mixing_predictions_and_explanations_answers_each(explaining):
    inputs = [({"x": [i, -1.0, 2.0, 0.5]}, i % 2 == 1) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(explaining.explain if ask else explaining.predict, "mlp", x) for x, ask in inputs]
        answers = [f.result() for f in futures]
    model = mlp_model()
    expected = [notebook_answer(model, x["x"]) for x, _ in inputs]
    for (_, asked), answer, prediction in zip(inputs, answers, expected):
        if asked:
            assert answer["target"] == prediction["label"] and len(answer["attributions"]) == 4
        else:
            assert answer == prediction
