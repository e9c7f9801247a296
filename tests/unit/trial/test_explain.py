"""Explanations in-process: the shared handler's explain path with TorchServe's own Context and request headers."""

from __future__ import annotations

import pytest
import torch
from helpers import CUSTOM_EXPLAIN, MLP_SOURCE, TOKENS_SOURCE, mlp_model

import msnb
from msnb.capture import local_code
from msnb.errors import HandlerRunError, SpecError
from msnb.spec import spec_from_source
from msnb.trial import runner
from msnb.ui.attributions import MAX_BARS, Explanation, bars_html

X = [0.5, -1.0, 2.0, 0.1]

DICT_INPUT = MLP_SOURCE.replace("return values\n", 'return {"x": values}\n').replace(
    "return self.fc2(torch.relu(self.fc1(x)))", 'return self.fc2(torch.relu(self.fc1(x["x"])))'
)


def outputs(x: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """F(x) and F(baseline) of the handler's model, computed here independently."""
    model = mlp_model()
    with torch.no_grad():
        tensor = torch.tensor([x])
        return model(tensor)[0], model(torch.zeros_like(tensor))[0]


def test_integrated_gradients_satisfy_completeness_for_the_predicted_class(mlp_spec):
    [answer] = msnb.test_handler(mlp_spec, [{"x": X}], explain=True)
    at_x, at_baseline = outputs(X)
    target = int(at_x.argmax())
    assert answer["method"] == "integrated_gradients" and answer["target"] == target
    assert answer["baseline"] == "zeros" and answer["n_steps"] == 50 and len(answer["attributions"]) == 4
    gap = float(at_x[target] - at_baseline[target])
    assert answer["output"] == pytest.approx(float(at_x[target]), abs=1e-5)
    assert abs(sum(answer["attributions"]) - gap) <= abs(answer["delta"]) + 1e-5
    assert abs(answer["delta"]) < 0.01  # converged at the default step count


def test_a_target_in_the_request_picks_the_class_explained(mlp_spec):
    at_x, at_baseline = outputs(X)
    for target in range(3):
        [answer] = msnb.test_handler(mlp_spec, [{"x": X, "target": target}], explain=True)
        assert answer["target"] == target
        gap = float(at_x[target] - at_baseline[target])
        assert abs(sum(answer["attributions"]) - gap) <= abs(answer["delta"]) + 1e-5


def test_a_batch_mixing_predictions_and_explanations_answers_each_kind(mlp_spec):
    samples = [{"x": X}, {"x": X}, {"x": [1, 2, 3, 4]}, {"x": [1, 2, 3, 4], "target": 0}]
    mixed = runner.run_handler(mlp_spec, samples, explain=[False, True, False, True])
    assert all(a.status == 200 for a in mixed)
    predicted = runner.run_handler(mlp_spec, samples[0::2])
    explained = runner.run_handler(mlp_spec, samples[1::2], explain=True)
    assert [mixed[0].body, mixed[2].body] == [a.body for a in predicted]
    for got, alone in zip([mixed[1].body, mixed[3].body], explained):
        assert got["target"] == alone.body["target"] and got["attributions"] == pytest.approx(
            alone.body["attributions"]
        )
    assert "label" in mixed[0].body and "attributions" not in mixed[0].body


def test_one_unexplainable_sample_fails_alone(mlp_spec):
    samples = [{"x": X, "target": 7}, {"x": X}, {"x": [1, 2]}, {"x": X, "target": "cat"}]
    answers = runner.run_handler(mlp_spec, samples, explain=True)
    assert [a.status for a in answers] == [400, 200, 400, 400]
    assert "target 7 is out of range: the model has 3 classes" in answers[0].body["error"]
    assert "send a 'target' from 0 to 2" in answers[0].body["hint"]
    assert answers[2].body["stage"] == "preprocess"
    assert "must be a class index" in answers[3].body["error"]


@pytest.mark.parametrize(
    "source, says",
    [
        (TOKENS_SOURCE, "needs floating-point inputs; preprocess returned a torch.int64 tensor"),
        (DICT_INPUT, "returned a dict"),
    ],
)
def test_an_input_integrated_gradients_cannot_explain_asks_for_an_explain_role(source, says):
    spec, sample = spec_from_source("unexplainable", source), {"x": X, "ids": [1, 4, 2]}
    [answer] = runner.run_handler(spec, [sample], explain=True)
    assert answer.status == 400 and says in answer.body["error"]
    assert answer.body["hint"].startswith("define `def explain(model, model_input)`")
    assert runner.run_handler(spec, [sample])[0].status == 200  # predictions still work
    with pytest.raises(HandlerRunError, match=r"needs floating-point|returned a dict") as err:
        msnb.test_handler(spec, [sample], explain=True)
    assert "define `def explain" in str(err.value)


def test_a_custom_explain_role_is_used_with_autograd_and_the_target():
    spec = spec_from_source("custom", CUSTOM_EXPLAIN)
    assert spec.roles["explain"] == "explain"
    answers = msnb.test_handler(spec, [{"x": X}, {"x": X, "target": 1}], explain=True)
    assert [a["custom"] for a in answers] == [True, True] and [a["target"] for a in answers] == [None, 1]
    model, x = mlp_model(), torch.tensor(X, requires_grad=True)
    model(x)[1].backward()
    assert answers[1]["attributions"] == pytest.approx((x.grad * x).tolist(), abs=1e-6)
    assert "label" in msnb.test_handler(spec, [{"x": X}])[0]  # predictions ignore the role


def test_a_custom_explain_role_that_raises_is_a_500_with_its_own_hint():
    spec = spec_from_source(
        "bad", MLP_SOURCE + "\ndef explain(model, model_input):\n    raise KeyError('feature names')\n"
    )
    [answer] = runner.run_handler(spec, [{"x": X}], explain=True)
    assert answer.status == 500 and answer.body["error"] == "explain failed: KeyError: 'feature names'"
    assert "call it in the notebook" in answer.body["hint"]


def test_without_captum_the_default_explanation_says_how_to_install_it():
    # as in a worker's Python without Captum (the handler's module runs in the test process, where this holds)
    no_captum = "import sys\nsys.modules['captum'] = None\nsys.modules['captum.attr'] = None\n"
    spec = spec_from_source("mlp", no_captum + MLP_SOURCE, init_kwargs={"hidden": 8})
    answers = runner.run_handler(spec, [{"x": X}, {"x": X}], explain=[True, False])
    assert [a.status for a in answers] == [500, 200]
    assert "Captum is not installed where this handler runs" in answers[0].body["error"]
    assert "pip install 'msnb[explain]'" in answers[0].body["hint"] and "define `def explain" in answers[0].body["hint"]


@pytest.mark.parametrize("signature", ["explain(model)", "explain(model, x, y)", "explain(*, model, x)"])
def test_an_explain_role_with_the_wrong_signature_is_refused_at_capture(signature):
    with pytest.raises(SpecError, match=r"role explain\) has the wrong signature[\s\S]*explain\(model, model_input\)"):
        spec_from_source("bad", MLP_SOURCE + f"\ndef {signature}:\n    return []\n")


def test_attributions_show_as_bars_or_a_heat_strip():
    answer = {"method": "integrated_gradients", "target": 1, "n_steps": 50, "attributions": [[0.5, -1.0], [0.25, 0]]}
    view = Explanation(answer)
    assert view.attributions == [0.5, -1.0, 0.25, 0.0]
    text = repr(view).splitlines()
    assert text[1].startswith("[  1] -1") and text[1].endswith("-" * 24) and "integrated gradients" in text[-1]
    assert view._repr_html_().count("display:flex") == 4
    strip = bars_html(list(range(MAX_BARS + 8)))
    assert strip.count("<span title=") == MAX_BARS + 8 and "display:flex" not in strip
    assert "<pre>" in bars_html({"label": "cat"})  # a custom explanation that is not numeric: its JSON


def test_an_explain_role_that_imports_captum_gets_it_pinned_like_any_import():
    source = (
        "import captum.attr\n"
        + MLP_SOURCE
        + (
            "\ndef explain(model, model_input):\n"
            "    return captum.attr.Saliency(model).attribute(model_input.unsqueeze(0), target=0)[0].tolist()\n"
        )
    )
    spec = local_code.make_hermetic(spec_from_source("saliency", source), local_code.search_path("."))
    assert "captum==0.9.0" in spec.requirements
    [answer] = msnb.test_handler(spec, [{"x": X}], explain=True)
    assert len(answer) == 4 and all(v >= 0 for v in answer)  # saliency: absolute gradients
