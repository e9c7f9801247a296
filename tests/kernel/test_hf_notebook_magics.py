"""Hugging Face objects in a real IPython shell: captured by name, served on TorchServe, stale once trained further."""

from __future__ import annotations

import textwrap

import pytest
import torch
from helpers import run_cell as run
from helpers import run_magic as magic

pytest.importorskip("transformers")

pytestmark = pytest.mark.kernel

TRAIN = "from hf_models import encode, train, train_tokenizer, tiny_bert\n" + textwrap.dedent(
    """
    hf_tokenizer = train_tokenizer()
    hf_model = tiny_bert(hf_tokenizer.vocab_size)
    train(hf_model, hf_tokenizer)
    """
)
HANDLER = textwrap.dedent(
    """
    def init_function():
        return hf_model

    def preprocess(text):
        return hf_tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

    def postprocess(output):
        return {"logits": output["logits"].tolist()}
    """
)
TEXTS = ["a good movie with great acting", "zyzzyva quux", "", "a terrible plot", "loved it", "slow"]


@pytest.fixture
def session(session, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return session


def truth(ns) -> torch.Tensor:
    """The notebook's own answer: the plain transformers call on the kernel's objects."""
    with torch.no_grad():
        return ns["hf_model"](**ns["encode"](ns["hf_tokenizer"], TEXTS)).logits


def close(answers, expected) -> None:
    torch.testing.assert_close(torch.tensor([a["logits"] for a in answers]), expected, atol=1e-4, rtol=0)


def test_the_summary_lists_the_objects_and_ms_test_answers_like_the_notebook(ip, session):
    run(ip, TRAIN)
    summary = run(ip, f"%%ms_handler hflocal --batch-size 4\n{HANDLER}")
    assert "object: hf_model: BertForSequenceClassification, config.json, model.safetensors" in summary
    assert "object: hf_tokenizer: TokenizersBackend, tokenizer.json, tokenizer_config.json" in summary
    close(session.test("hflocal", TEXTS), truth(ip.user_ns))


@pytest.mark.server
def test_served_answers_equal_the_notebooks_and_training_further_makes_them_stale(ip, session):
    run(ip, TRAIN)
    run(ip, f"%%ms_handler hfserved --batch-size 4\n{HANDLER}")
    server, _ = magic(ip, "ms_serve", "hfserved")
    expected = truth(ip.user_ns)
    close(server.predict_many("hfserved", TEXTS), expected)  # concurrent clients, batched by TorchServe
    _, out = magic(ip, "ms_predict", "hfserved --data '\"slow\"'")
    assert "Warning" not in out
    run(ip, "train(hf_model, hf_tokenizer, steps=2)")  # trained further after %ms_serve
    served, out = magic(ip, "ms_predict", "hfserved --data '\"slow\"'")
    close([served], expected[-1:])  # the server still holds the model as it was captured
    assert "`hf_model`" in out and "changed since" in out
    status, _ = magic(ip, "ms_status")
    assert status["handlers"]["hfserved"]["stale"]


SUBCLASS = textwrap.dedent(
    """
    from transformers import BertForSequenceClassification


    class HalvedBert(BertForSequenceClassification):
        def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
            output = super().forward(input_ids, attention_mask, token_type_ids, labels=labels)
            output.logits = output.logits / 2
            return output
    """
)


def test_a_model_whose_class_a_cell_defines_travels_as_code_and_answers_like_the_notebook(ip, session):
    run(ip, TRAIN)
    run(ip, SUBCLASS)
    run(ip, "hf_model = HalvedBert(hf_model.config)\ntrain(hf_model, hf_tokenizer, steps=5, lr=0.05)")
    summary = run(ip, f"%%ms_handler hfmine --batch-size 4\n{HANDLER}")
    assert "object: hf_model: HalvedBert, config.json, model.safetensors" in summary
    expected = truth(ip.user_ns)
    assert expected.abs().max() > 0.05  # trained: weights that did not travel would answer otherwise
    close(session.test("hfmine", TEXTS), expected)


@pytest.mark.server
def test_a_model_whose_class_a_cell_defines_is_served_on_torchserve_with_the_notebooks_answers(ip, session):
    run(ip, TRAIN)
    run(ip, SUBCLASS)
    run(ip, "hf_model = HalvedBert(hf_model.config)\ntrain(hf_model, hf_tokenizer, steps=5, lr=0.05)")
    run(ip, f"%%ms_handler hfmineserved --batch-size 4\n{HANDLER}")
    server, _ = magic(ip, "ms_serve", "hfmineserved")
    close(server.predict_many("hfmineserved", TEXTS), truth(ip.user_ns))  # concurrent clients, batched
