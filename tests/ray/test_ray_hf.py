"""Hugging Face objects on Ray Serve: the same model folder, the same shared handler, the notebook's answers."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_ray_notebook import cell

pytest.importorskip("transformers")
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


def test_a_tokenizer_and_model_output_answer_on_ray_like_the_notebook(ip, ray_session):
    cell(ip, TRAIN)
    cell(ip, f"%%ms_handler rbert --batch-size 4\n{HANDLER}")
    server = ray_session.serve("rbert", engine="ray")
    with ThreadPoolExecutor(len(TEXTS)) as pool:  # concurrent clients: Ray Serve batches them
        answers = list(pool.map(lambda text: server.predict("rbert", text), TEXTS))
    ns = ip.user_ns
    with torch.no_grad():
        expected = ns["ray_model"](**ns["encode"](ns["ray_tokenizer"], TEXTS)).logits
    torch.testing.assert_close(torch.tensor([a["logits"] for a in answers]), expected, atol=1e-4, rtol=0)
