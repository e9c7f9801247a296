"""A LoRA model trained in the notebook, exported and served on a real TorchServe: the notebook's answers, on the
server's own torch (peft and accelerate require torch: the model folder must hold none)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from helpers import torch_packages

pytest.importorskip("peft")

from hf_models import LORA_POOL, logits, lora_model

from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.package import archive

pytestmark = pytest.mark.server
TEXTS = ["a good movie with great acting", "zyzzyva quux never seen", "", "a terrible plot", "loved it", "slow"]

HANDLER = textwrap.dedent(
    """\
    import peft
    import torch

    def init_function():
        return model

    def preprocess(text):
        return tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

    def postprocess(output):
        return {"logits": output["logits"].tolist(), "torch": torch.__file__, "peft": peft.__file__, "cwd": os.getcwd()}
    """
).replace("import peft\n", "import os\nimport peft\n")


def test_an_exported_lora_model_answers_like_the_notebook_on_the_servers_torch(tmp_path, own_server):
    tokenizer, model = lora_model()
    namespace = {"tokenizer": tokenizer, "model": model}
    spec = capture("lora", HANDLER, LORA_POOL, namespace=namespace, search_path=search_path(tmp_path), batch_size=4)
    names = [line.split("==")[0] for line in spec.requirements]
    assert {"peft", "accelerate", "transformers"} <= set(names) and "torch" not in names
    own_server.register(archive.build(spec, tmp_path / "store", fmt=archive.EXPORT_FORMAT))
    answers = own_server.client.predict_many("lora", TEXTS)  # concurrent clients, batched by TorchServe
    got = torch.tensor([a["logits"] for a in answers])
    torch.testing.assert_close(got, logits(model, tokenizer, TEXTS), atol=1e-4, rtol=0)
    import peft

    assert {(a["torch"], a["peft"]) for a in answers} == {(torch.__file__, peft.__file__)}
    model_dir = Path(answers[0]["cwd"])
    assert (model_dir / "venv").is_dir(), "TorchServe made the model venv (useVenv: true)"
    assert torch_packages(model_dir) == []
