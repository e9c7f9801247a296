"""A PreTrainedModel (and PretrainedConfig) subclass that a cell defines travels as code; its weights as safetensors.

Every answer is compared with the plain call ``model(**tokenizer(...)).logits`` on the kernel's own model.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import logits, tiny_bert, train, train_tokenizer, trained

from msnb.capture.cells import capture
from msnb.errors import CaptureError
from msnb.package.model_folder import ModelFolder
from msnb.templates.msnb_runtime.handler.hf import HF_DIR
from msnb.trial import runner

CLASSES = textwrap.dedent(
    """
    import torch
    from transformers import BertForSequenceClassification, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import SequenceClassifierOutput


    class MeanConfig(PretrainedConfig):
        model_type = "mean-classifier"

        def __init__(self, vocab_size=120, hidden=16, **kwargs):
            super().__init__(**kwargs)
            self.vocab_size = vocab_size
            self.hidden = hidden


    class MeanClassifier(PreTrainedModel):
        config_class = MeanConfig

        def __init__(self, config):
            super().__init__(config)
            self.embed = torch.nn.Embedding(config.vocab_size, config.hidden)
            self.head = torch.nn.Linear(config.hidden, config.num_labels)
            self.post_init()

        def forward(self, input_ids, attention_mask, labels=None):
            mask = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)
            logits = self.head((self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1))
            loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
            return SequenceClassifierOutput(loss=loss, logits=logits)


    class TemperedBert(BertForSequenceClassification):
        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
            output = super().forward(input_ids, attention_mask, token_type_ids, labels=labels, **kwargs)
            output.logits = output.logits / self.config.logit_scale
            return output
    """
)
BUILD = {
    "MeanClassifier": "model = MeanClassifier(MeanConfig(vocab_size=tokenizer.vocab_size, num_labels=2))\n",
    "TemperedBert": "base = tiny_bert(tokenizer.vocab_size)\nbase.config.logit_scale = 0.5\n"
    "model = TemperedBert(base.config)\n",
}
HANDLER = """\
def init_function():
    return model

def preprocess(text):
    return tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

def postprocess(output):
    return {"logits": output["logits"].tolist(), "label": config.id2label[int(output["logits"].argmax())]}
"""
TEXTS = ["a good movie with great acting", "zyzzyva quux never seen", "", "a terrible plot", "loved it"]


def notebook(cls: str, dtype=torch.float32):
    """The cells and the kernel's namespace: the classes defined in a cell (module ``__main__``), a model trained."""
    namespace = {"__name__": "__main__"}
    exec(CLASSES, namespace)
    tokenizer = train_tokenizer()
    namespace |= {"tokenizer": tokenizer, "tiny_bert": tiny_bert}
    exec(BUILD[cls], namespace)
    model = namespace["model"]
    train(model, tokenizer, steps=10, lr=0.05)
    namespace["model"] = model.to(dtype)
    namespace["config"] = model.config
    pool = [
        ("In [1]", CLASSES),
        ("In [2]", f"tokenizer = train_tokenizer()\n{BUILD[cls]}train(model, tokenizer)\nconfig = model.config\n"),
    ]
    return pool, namespace


def run(pool, namespace, cell=HANDLER, **config):
    return capture("cls", cell, pool, namespace=namespace, **config)


@pytest.mark.parametrize("cls", ["MeanClassifier", "TemperedBert"])
def test_a_model_whose_class_a_cell_defines_serves_the_notebooks_answers(cls):
    pool, namespace = notebook(cls)
    spec = run(pool, namespace, batch_size=4)
    assert spec.objects.names == ("model", "tokenizer", "config")
    pulled = {n for block in spec.blocks for n in block.names}
    assert cls in pulled and ("MeanConfig" in pulled) == (cls == "MeanClassifier")  # with the config class it names
    got = runner.predict_in_process(spec, TEXTS)
    truth = logits(namespace["model"], namespace["tokenizer"], TEXTS)
    assert truth.abs().max() > 0.05  # trained: a model rebuilt from its config alone would answer otherwise
    torch.testing.assert_close(torch.tensor([a["logits"] for a in got]), truth, atol=1e-4, rtol=0)
    assert [a["label"] for a in got] == [namespace["config"].id2label[int(i)] for i in truth.argmax(-1)]


def test_its_weights_and_config_travel_as_safetensors_and_json_and_the_class_is_rebound_from_the_code(tmp_path):
    pool, namespace = notebook("MeanClassifier")
    staged = ModelFolder.stage(run(pool, namespace), tmp_path / "model").path
    assert sorted(p.name for p in (staged / HF_DIR / "model").iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((staged / HF_DIR / "config/config.json").read_text())
    assert config["model_type"] == "mean-classifier" and config["hidden"] == 16
    text = (staged / "handler_model.py").read_text()
    assert "model = _msnb_load_object(__file__, 'model', MeanClassifier, 'float32')" in text
    assert text.index("class MeanClassifier(") < text.index("'model', MeanClassifier") < text.index("handle =")


def test_the_served_model_keeps_eval_mode_and_its_dtype():
    pool, namespace = notebook("MeanClassifier", torch.bfloat16)
    cell = HANDLER.replace(
        'return {"logits"', 'return {"dtype": str(model.dtype), "training": model.training, "logits"'
    )
    (answer,) = runner.predict_in_process(run(pool, namespace, cell=cell), TEXTS[:1])
    assert (answer["dtype"], answer["training"]) == ("torch.bfloat16", False)


def test_a_model_built_before_its_class_was_defined_again_is_refused():
    pool, namespace = notebook("MeanClassifier")
    exec(CLASSES, namespace)  # the class cell run again: the kernel's model is an instance of the old class
    with pytest.raises(CaptureError, match=r"`model` .*earlier definition of MeanClassifier") as err:
        run(pool, namespace)
    assert "run the cell that builds the object again" in err.value.hint


def test_a_class_of_the_kernel_that_no_cell_defines_is_refused_with_the_way_to_ship_it():
    tokenizer, model = trained()
    cls = type("MyBert", (type(model),), {"__module__": "__main__"})  # made at run time: no class statement
    namespace = {"tokenizer": tokenizer, "model": cls(model.config), "config": model.config}
    pool = [("In [2]", "tokenizer, config = make()\nMyBert = make()\nmodel = MyBert(config)\n")]
    with pytest.raises(CaptureError, match=r"`model` .*__main__:MyBert\) has a class from '__main__'") as err:
        run(pool, namespace)
    assert "define the class in a cell with a class statement" in err.value.hint


def test_a_lora_adapter_on_a_model_whose_class_a_cell_defines_serves_the_notebooks_answers():
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    pool, namespace = notebook("TemperedBert")
    lora = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"])
    namespace["model"] = model = get_peft_model(namespace["model"], lora)
    train(model, namespace["tokenizer"], steps=5, lr=0.05)
    pool = [*pool, ("In [3]", "model = get_peft_model(model, lora)\ntrain(model, tokenizer)\n")]
    spec = run(pool, namespace, batch_size=4)
    assert "TemperedBert" in {n for block in spec.blocks for n in block.names}
    assert spec.objects.items[0].base == "__main__:TemperedBert"
    got = torch.tensor([a["logits"] for a in runner.predict_in_process(spec, TEXTS)])
    torch.testing.assert_close(got, logits(model, namespace["tokenizer"], TEXTS), atol=1e-4, rtol=0)
