"""Hugging Face objects trained in the notebook travel with the handler: saved in safe formats, rebound on load.

Every answer is compared with the plain transformers call on the kernel's own objects (tests/hf_models.py).
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import HANDLER, POOL, TEXTS, logits, train, trained

from msnb.capture.cells import RUNTIME_HINT, capture
from msnb.capture.kernel_values import values_changed
from msnb.capture.local_code import search_path
from msnb.errors import CaptureError
from msnb.package.model_folder import ModelFolder
from msnb.templates.msnb_runtime.handler.hf import HF_DIR, ObjectLoadError, load_object
from msnb.trial import runner
from msnb.ui.display import SpecSummary

INPUT_IDS_ONLY = HANDLER.replace('return_tensors="pt")', 'return_tensors="pt")["input_ids"][0]')


@pytest.fixture(scope="module")
def kernel():
    tokenizer, model = trained()
    return {"tokenizer": tokenizer, "model": model}


def run(cell: str, namespace, pool=POOL, **config):
    return capture("cls", textwrap.dedent(cell), list(pool), namespace=namespace, **config)


def answers_match_the_notebook(spec, kernel, texts=TEXTS, keys=None):
    got = torch.tensor([a["logits"] for a in runner.predict_in_process(spec, texts)])
    truth = logits(kernel["model"], kernel["tokenizer"], texts, keys)
    torch.testing.assert_close(got, truth, atol=1e-4, rtol=0)


# ---------------------------------------------------------------- the natural handler cell
@pytest.mark.parametrize(
    "cell, keys", [(HANDLER, None), (INPUT_IDS_ONLY, ["input_ids"])], ids=["whole-encoding", "input-ids"]
)
def test_a_trained_tokenizer_and_model_serve_the_notebooks_answers(kernel, cell, keys):
    spec = run(cell, kernel, batch_size=4)
    assert spec.objects.names == ("model", "tokenizer") and spec.values is None
    answers_match_the_notebook(spec, kernel, keys=keys)  # in batches of 4: unknown words, an empty string


def test_objects_are_saved_as_safetensors_and_json_never_pickles(kernel, tmp_path):
    spec = run(HANDLER, kernel)
    staged = ModelFolder.stage(spec, tmp_path / "model").path
    files = sorted(p.relative_to(staged / HF_DIR).as_posix() for p in (staged / HF_DIR).rglob("*") if p.is_file())
    assert files == [
        "model/config.json",
        "model/model.safetensors",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
    ]
    assert json.loads((staged / HF_DIR / "model/config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"
    ]


def test_the_served_model_keeps_eval_mode_and_its_dtype(kernel, tmp_path):
    half = {**kernel, "model": trained()[1].to(torch.bfloat16)}
    spec = run(HANDLER, half)
    staged = ModelFolder.stage(spec, tmp_path / "model").path
    model = load_object(str(staged / "handler_model.py"), "model", spec.objects.items[0].cls, "bfloat16")
    assert model.dtype == torch.bfloat16 and not model.training


def test_the_summary_lists_each_object_with_its_class_files_and_size(kernel):
    rows = [value for key, value in SpecSummary(run(HANDLER, kernel)).rows if key == "object"]
    assert rows[0].startswith("model: BertForSequenceClassification, config.json, model.safetensors, ")
    assert rows[1].startswith("tokenizer: TokenizersBackend, tokenizer.json, tokenizer_config.json, ")
    assert all("KB" in row for row in rows)


def test_requirements_follow_the_objects_with_the_kernels_versions(kernel, tmp_path):
    import safetensors
    import tokenizers
    import transformers

    spec = capture("cls", HANDLER, POOL, namespace=kernel, search_path=search_path(tmp_path))
    assert f"transformers=={transformers.__version__}" in spec.requirements
    assert f"tokenizers=={tokenizers.__version__}" in spec.requirements
    assert f"safetensors=={safetensors.__version__}" in spec.requirements


def test_training_further_after_capture_makes_the_handler_stale():
    tokenizer, model = trained()
    namespace = {"tokenizer": tokenizer, "model": model}
    spec = run(HANDLER, namespace)
    assert values_changed(spec, namespace) is None
    train(model, tokenizer, steps=1)
    assert values_changed(spec, namespace) == "`model`"
    assert run(HANDLER, namespace).digest() != spec.digest()
    tokenizer.add_tokens(["zyzzyva"])
    assert values_changed(spec, namespace) == "`model`, `tokenizer`"


# ---------------------------------------------------------------- bad inputs
def test_an_object_whose_save_raises_is_refused_naming_it_its_class_and_the_error(kernel):
    model = trained()[1]
    model.config.label_source = {"imdb", "local"}  # a set: config.json cannot hold it
    with pytest.raises(CaptureError) as err:
        run(HANDLER, {**kernel, "model": model})
    message = err.value.message
    assert "`model` (used on line 2 of the handler cell, " in message and "BertForSequenceClassification)" in message
    assert "save_pretrained raised TypeError" in message and "not JSON serializable" in message
    assert "call save_pretrained on it in the notebook" in err.value.hint


def test_a_class_from_a_trust_remote_code_module_is_refused(kernel, tmp_path, monkeypatch):
    from transformers import AutoConfig, AutoModelForSequenceClassification, dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme/modeling_acme.py").write_text(
        "from transformers import BertForSequenceClassification\n\n\n"
        "class AcmeClassifier(BertForSequenceClassification):\n    pass\n"
    )
    config = {"model_type": "bert", "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 1}
    config |= {"num_attention_heads": 2, "intermediate_size": 16}
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_acme.AcmeClassifier"}
    (tmp_path / "acme/config.json").write_text(json.dumps(config))
    loaded = AutoConfig.from_pretrained(tmp_path / "acme", trust_remote_code=True, local_files_only=True)
    remote = AutoModelForSequenceClassification.from_config(loaded, trust_remote_code=True)
    assert type(remote).__module__.startswith("transformers_modules")
    with pytest.raises(CaptureError, match=r"`model` .*AcmeClassifier\) has a class from 'transformers_modules") as err:
        run(HANDLER, {**kernel, "model": remote})
    assert "define" in err.value.hint and "ship its module" in err.value.hint


def test_a_2gb_model_is_refused_before_anything_is_written_naming_its_size_and_the_option(kernel):
    from transformers import BertConfig, BertForSequenceClassification

    with torch.device("meta"):  # 2 GB of float32 weights that take no memory (and cannot be saved)
        big = BertForSequenceClassification(
            BertConfig(vocab_size=500_000, hidden_size=1024, num_hidden_layers=1, num_attention_heads=8)
        )
    with pytest.raises(CaptureError, match=r"`model` .* holds 2\.\d GB of weights, over the 64 MB limit") as err:
        run(HANDLER, {**kernel, "model": big})
    assert "--max-value-mb" in err.value.hint and "save_pretrained raised" not in err.value.message


def test_a_plain_module_returned_by_init_function_gets_the_two_lines_to_write():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

    with pytest.raises(CaptureError, match=r"`model` .* is an nn.Module \(Net\)") as err:
        run("def init_function():\n    return model\n", {"model": Net()}, [("In [1]", "model = Net()\n")])
    assert "`return Net(...)` in init_function" in err.value.hint
    assert "`--checkpoint model` on the %%ms_handler line" in err.value.hint


def test_without_a_kernel_the_objects_are_refused_with_the_hint_to_execute():
    with pytest.raises(CaptureError, match=r"(?s)`model` .*`tokenizer`") as err:
        capture("cls", HANDLER, POOL)
    assert err.value.hint == RUNTIME_HINT and "msnb export --execute" in err.value.hint


def test_a_class_missing_on_the_server_is_named_with_the_requirement_hint(tmp_path):
    with pytest.raises(ObjectLoadError, match=r"acme_transformers\.models:Bert.*No module named") as err:
        load_object(str(tmp_path / "handler_model.py"), "model", "acme_transformers.models:Bert", "float32")
    assert "Hint: install the requirements of the archive (acme_transformers" in str(err.value)


# ---------------------------------------------------------------- model outputs and encodings (msnb_runtime.handler.collate)
def test_a_model_output_is_split_into_one_of_its_own_type_per_sample(kernel):
    from transformers.modeling_outputs import SequenceClassifierOutput

    from msnb.templates.msnb_runtime.handler.collate import split

    output = SequenceClassifierOutput(logits=torch.arange(6.0).reshape(3, 2))
    samples = split(output, 3)
    assert all(type(s) is SequenceClassifierOutput for s in samples)
    assert samples[1]["logits"].tolist() == [2.0, 3.0] and samples[2].logits.tolist() == [4.0, 5.0]


def test_encodings_of_one_text_collate_into_the_keywords_forward_takes(kernel):
    from msnb.templates.msnb_runtime.handler.collate import collate, takes_keywords

    tokenizer, model = kernel["tokenizer"], kernel["model"]
    batch = collate([tokenizer(t, padding="max_length", max_length=16, return_tensors="pt") for t in TEXTS[:3]])
    assert {k: tuple(v.shape) for k, v in batch.items()} == {"input_ids": (3, 16), "attention_mask": (3, 16)}
    assert takes_keywords(model, batch)
    assert not takes_keywords(torch.nn.Linear(2, 2), {"a": torch.ones(2)})  # forward(input): the dict itself


def test_the_mar_the_kserve_and_the_ray_layouts_carry_the_objects_unchanged(kernel, tmp_path):
    import zipfile

    from msnb.session.export import write_kserve, write_ray

    spec = run(HANDLER, kernel)
    saved = {f"{HF_DIR}/{path}": data for path, data in spec.objects.files}
    with zipfile.ZipFile(write_kserve([spec], tmp_path / "kserve") / "model-store" / "cls.mar") as z:
        assert {name: z.read(name) for name in z.namelist() if name.startswith(HF_DIR)} == saved
    ray = write_ray([spec], tmp_path / "ray") / "cls"
    assert {p.relative_to(ray).as_posix(): p.read_bytes() for p in (ray / HF_DIR).rglob("*") if p.is_file()} == saved
