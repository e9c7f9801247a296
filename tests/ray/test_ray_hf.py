"""Hugging Face objects on Ray Serve: the same model folder, the same shared handler, the notebook's answers."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from IPython.utils.capture import capture_output

import msnb.session.core

pytest.importorskip("transformers")
pytestmark = pytest.mark.xdist_group("ray-notebook")
TRAIN = "from hf_models import encode, train, train_tokenizer, tiny_bert\n" + textwrap.dedent(
    """
    ray_tokenizer = train_tokenizer()
    ray_model = tiny_bert(ray_tokenizer.vocab_size)
    train(ray_model, ray_tokenizer)
    """
)
HANDLER = textwrap.dedent(
    """
    def init_function():
        return ray_model

    def preprocess(text):
        return ray_tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

    def postprocess(output):
        return {"logits": output["logits"].tolist()}
    """
)
TEXTS = ["a good movie with great acting", "zyzzyva quux", "", "a terrible plot", "loved it"]


@pytest.fixture
def session(monkeypatch):
    fresh = msnb.session.core.Session()
    monkeypatch.setattr(msnb.session.core, "_default", fresh)
    yield fresh
    fresh.stop()


def cell(shell, source: str):
    with capture_output() as cap:
        result = shell.run_cell(source, store_history=True)
    assert result.success, f"{result.error_in_exec or result.error_before_exec}\n{cap.stdout}{cap.stderr}"
    return result.result


def test_a_tokenizer_and_model_output_answer_on_ray_like_the_notebook(ip, session):
    cell(ip, TRAIN)
    cell(ip, f"%%ms_handler rbert --batch-size 4\n{HANDLER}")
    server = session.serve("rbert", engine="ray")
    with ThreadPoolExecutor(len(TEXTS)) as pool:  # concurrent clients: Ray Serve batches them
        answers = list(pool.map(lambda text: server.predict("rbert", text), TEXTS))
    ns = ip.user_ns
    with torch.no_grad():
        expected = ns["ray_model"](**ns["encode"](ns["ray_tokenizer"], TEXTS)).logits
    torch.testing.assert_close(torch.tensor([a["logits"] for a in answers]), expected, atol=1e-4, rtol=0)
