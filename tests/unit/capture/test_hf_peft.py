"""A PEFT model (LoRA on a tiny BERT built from its config, trained in the notebook) travels: adapter and base.

Every answer is compared with the plain call ``peft_model(**tokenizer(...)).logits`` on the kernel's own model.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

pytest.importorskip("peft")

from hf_models import LORA_POOL as POOL
from hf_models import logits, lora_model, train

from msnb.capture.cells import capture
from msnb.capture.kernel_values import values_changed
from msnb.capture.local_code import search_path
from msnb.errors import CaptureError
from msnb.package.model_folder import ModelFolder
from msnb.templates.msnb_runtime.handler.hf import HF_DIR
from msnb.trial import runner

HANDLER = textwrap.dedent(
    """\
    def init_function():
        return model

    def preprocess(text):
        return tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

    def postprocess(output):
        return {"logits": output["logits"].tolist(), "dtype": str(model.dtype), "training": model.training}
    """
)
TEXTS = ["a good movie with great acting", "zyzzyva quux never seen", "", "a terrible plot", "loved it"]


def run(namespace, **config):
    return capture("cls", HANDLER, POOL, namespace=namespace, **config)


@pytest.mark.parametrize("adapter_name", ["default", "sentiment"])
def test_a_lora_model_trained_in_the_notebook_serves_the_notebooks_answers(adapter_name):
    tokenizer, model = lora_model(adapter_name)
    spec = run({"tokenizer": tokenizer, "model": model}, batch_size=4)
    got = runner.predict_in_process(spec, TEXTS)
    truth = logits(model, tokenizer, TEXTS)
    assert truth.abs().max() > 0.05  # trained: the base model alone would answer otherwise
    torch.testing.assert_close(torch.tensor([a["logits"] for a in got]), truth, atol=1e-4, rtol=0)
    assert {(a["dtype"], a["training"]) for a in got} == {("torch.float32", False)}


def test_the_adapter_and_its_base_are_saved_apart_as_safetensors_and_the_kernels_model_is_untouched(tmp_path):
    tokenizer, model = lora_model()
    before = logits(model, tokenizer, TEXTS)
    staged = ModelFolder.stage(run({"tokenizer": tokenizer, "model": model}), tmp_path / "model").path
    saved = sorted(p.relative_to(staged / HF_DIR / "model").as_posix() for p in (staged / HF_DIR / "model").rglob("*"))
    assert [p for p in saved if "." in p and not p.endswith(".md")] == [
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "base/config.json",
        "base/model.safetensors",
    ]
    assert json.loads((staged / HF_DIR / "model/adapter/adapter_config.json").read_text())["peft_type"] == "LORA"
    from safetensors import safe_open

    with safe_open(staged / HF_DIR / "model/base/model.safetensors", "pt") as base:
        assert not [k for k in base.keys() if "lora" in k]  # the base without the adapter's layers
    text = (staged / "handler_model.py").read_text()
    assert "'peft.peft_model:PeftModelForSequenceClassification', 'float32', base='transformers." in text
    assert "lora_A" in repr(model)  # the kernel's model still carries its adapter, answering as before
    torch.testing.assert_close(logits(model, tokenizer, TEXTS), before, atol=0, rtol=0)


def test_a_bfloat16_lora_model_keeps_its_dtype():
    tokenizer, model = lora_model(dtype=torch.bfloat16)
    (answer,) = runner.predict_in_process(run({"tokenizer": tokenizer, "model": model}), TEXTS[:1])
    assert (answer["dtype"], answer["training"]) == ("torch.bfloat16", False)


def test_requirements_name_peft_and_accelerate_at_the_kernels_versions_and_never_torch(tmp_path):
    import accelerate
    import peft
    import transformers

    tokenizer, model = lora_model()
    spec = capture(
        "cls", HANDLER, POOL, namespace={"tokenizer": tokenizer, "model": model}, search_path=search_path(tmp_path)
    )
    assert f"peft=={peft.__version__}" in spec.requirements
    assert f"accelerate=={accelerate.__version__}" in spec.requirements
    assert f"transformers=={transformers.__version__}" in spec.requirements
    assert not [r for r in spec.requirements if r.split("=")[0].strip().lower() in ("torch", "torchserve")]


def test_training_the_adapter_further_makes_the_handler_stale():
    tokenizer, model = lora_model()
    namespace = {"tokenizer": tokenizer, "model": model}
    spec = run(namespace)
    assert values_changed(spec, namespace) is None
    train(model, tokenizer, steps=1)
    assert values_changed(spec, namespace) == "`model`"


def test_a_model_with_two_adapters_is_refused_with_the_way_to_keep_one():
    from peft import LoraConfig

    tokenizer, model = lora_model()
    model.add_adapter("other", LoraConfig(task_type="SEQ_CLS", r=2, target_modules=["query"]))
    with pytest.raises(CaptureError, match=r"`model` .*holds 2 adapters \(default, other\)") as err:
        run({"tokenizer": tokenizer, "model": model})
    assert "model.delete_adapter(name)" in err.value.hint and "merge_and_unload()" in err.value.hint
