"""The GPU paths on a real GPU (skipped where CUDA is absent, as on CI): the staged model folder's shared handler,
driven with TorchServe's own Context as a GPU worker drives it, loads on ``cuda:N``, answers like the notebook's
own CPU computation, caps its memory at ``maxGPUMemory``, streams, explains; NVML lists the card for the widget."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from helpers import MLP_SOURCE, mlp_model, notebook_answer
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from msnb.package.model_folder import ModelFolder
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.names import CONFIG, HANDLER_MODULE
from msnb.ui.widget.devices import list_devices

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
TS_METRICS_YAML = Path(sys.modules["ts"].__file__).parent / "configs" / "metrics.yaml"
INPUTS = [[float(i), 1.0, -2.0, 0.5] for i in range(6)]
STREAM_SOURCE = MLP_SOURCE.replace(
    "def postprocess(output):",
    "def inference(model, batch):\n    for step in range(3):\n        yield model(batch * (step + 1))\n\ndef postprocess(output):",
)


@pytest.fixture
def served(tmp_path) -> Iterator:
    """``load(spec, gpu, yaml)``: the model folder staged by msnb and loaded as TorchServe's worker for ``gpu``."""
    loaded: list[str] = []

    def load(spec, gpu=0, **config):
        model_dir = ModelFolder.stage(spec, tmp_path / spec.name).path
        yaml_config = yaml.safe_load((model_dir / CONFIG).read_text()) | config
        metrics = MetricsCacheYamlImpl(config_file_path=str(TS_METRICS_YAML))
        metrics.initialize_cache()
        manifest = {"model": {"modelName": spec.name, "handler": f"{HANDLER_MODULE}.py"}}
        context = Context(
            spec.name, str(model_dir), manifest, 8, gpu, "0.12.0", metrics=metrics, model_yaml_config=yaml_config
        )
        sys.path.insert(0, str(model_dir))
        loaded.append(str(model_dir))
        for name in [n for n in sys.modules if n == HANDLER_MODULE or n.startswith("msnb_")]:
            del sys.modules[name]
        module = importlib.import_module(HANDLER_MODULE)
        module.handle(None, context)
        return module, context

    yield load
    for path in loaded:
        sys.path.remove(path)


def send(module, context, bodies):
    """What ts/service.py does for one batch of application/json requests."""
    context.request_processor = [RequestProcessor({}) for _ in bodies]
    context.request_ids = {i: f"req-{i}" for i in range(len(bodies))}
    context.metrics.request_ids = context.request_ids
    answers = module.handle([{"body": b} for b in bodies], context)
    return answers, [context.get_response_status(i)[0] for i in range(len(bodies))]


def test_a_gpu_worker_loads_on_its_gpu_and_answers_like_the_notebooks_cpu_model(served):
    gpu = torch.cuda.device_count() - 1  # TorchServe's gpu_id for this worker: the last card, not always 0
    module, context = served(spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, batch_size=8), gpu)
    answers, codes = send(module, context, [{"x": x} for x in INPUTS])
    assert codes == [200] * len(INPUTS)
    expected = [notebook_answer(mlp_model(), x) for x in INPUTS]
    for got, want in zip(answers, expected, strict=True):
        assert got["label"] == want["label"]
        torch.testing.assert_close(torch.tensor(got["scores"]), torch.tensor(want["scores"]), atol=1e-4, rtol=0)
    assert module.handle.device == torch.device("cuda", gpu)
    assert {p.device for p in module.handle.model.parameters()} == {torch.device("cuda", gpu)}
    json.dumps(answers)  # what TorchServe sends: plain JSON, no CUDA tensor left in an answer


def test_max_gpu_memory_caps_what_the_worker_may_allocate(served):
    spec = spec_from_source("capped", MLP_SOURCE, init_kwargs={"hidden": 8}, device="gpu", max_gpu_memory=1024)
    module, context = served(spec, 0)
    assert module.handle.device == torch.device("cuda", 0) and module.handle.memory_fraction is not None
    torch.cuda.empty_cache()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda:0")  # 2 GiB past the 1,024 MB cap
    torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")  # well under it: allowed
    answers, codes = send(module, context, [{"x": INPUTS[0]}])
    assert codes == [200] and answers[0]["label"] == notebook_answer(mlp_model(), INPUTS[0])["label"]
    torch.cuda.set_per_process_memory_fraction(1.0, 0)


def test_device_type_cpu_keeps_a_gpu_worker_on_the_cpu(served):
    module, context = served(spec_from_source("oncpu", MLP_SOURCE, init_kwargs={"hidden": 8}), 0, deviceType="cpu")
    assert {p.device.type for p in module.handle.model.parameters()} == {"cpu"}
    answers, codes = send(module, context, [{"x": INPUTS[1]}])
    assert codes == [200] and answers == [notebook_answer(mlp_model(), INPUTS[1])]


def test_a_generator_inference_streams_each_step_from_the_gpu(served):
    module, context = served(spec_from_source("gen", STREAM_SOURCE, init_kwargs={"hidden": 8}, batch_size=4), 0)
    sent: dict[int, str] = {0: "", 1: ""}
    context.msnb_send_chunks = lambda pieces, types: [sent.__setitem__(i, sent[i] + p) for i, p in pieces.items()]
    answers, codes = send(module, context, [{"x": x} for x in INPUTS[:2]])
    assert codes == [200, 200]
    model = mlp_model()
    for idx, x in enumerate(INPUTS[:2]):
        lines = [json.loads(line) for line in (sent[idx] + (answers[idx] or "")).splitlines() if line]
        truth = [notebook_answer(lambda b, k=k: model(b * (k + 1)), x) for k in range(3)]
        assert [line["label"] for line in lines] == [t["label"] for t in truth]
        torch.testing.assert_close(
            torch.tensor([line["scores"] for line in lines]),
            torch.tensor([t["scores"] for t in truth]),
            atol=1e-4,
            rtol=0,
        )


def test_an_explanation_runs_its_gradients_on_the_gpu(served):
    module, context = served(spec_from_source("why", MLP_SOURCE, init_kwargs={"hidden": 8}), 0)
    context.request_processor = [RequestProcessor({"explain": "True"})]
    context.request_ids = {0: "req-0"}
    context.metrics.request_ids = context.request_ids
    answers = module.handle([{"body": {"x": INPUTS[2]}, "explain": True}], context)
    assert context.get_response_status(0)[0] == 200, answers
    [why] = answers
    model, x = mlp_model(), torch.tensor(INPUTS[2])
    with torch.no_grad():  # the notebook's model on the CPU: the output explained, and IG's completeness
        out, base = model(x.unsqueeze(0))[0], model(torch.zeros(1, 4))[0]
    target = int(out.argmax())
    assert why["target"] in (None, target) and abs(why["output"] - float(out[target])) < 1e-4
    assert abs(sum(why["attributions"]) - (float(out[target]) - float(base[target]))) < 1e-2


def test_nvml_lists_every_card_with_its_memory_for_the_build_widget():
    inventory = list_devices()
    assert inventory.note is None, inventory.note
    assert len(inventory.gpus) == torch.cuda.device_count()
    first = inventory.gpus[0]
    total_mb = torch.cuda.get_device_properties(0).total_memory // 2**20
    assert torch.cuda.get_device_name(0) in first.label and abs(first.total_mb - total_mb) <= 1024


def test_a_hugging_face_model_trained_in_the_kernel_answers_from_the_gpu_like_the_notebook(served):
    pytest.importorskip("transformers")
    from hf_models import HANDLER, POOL, TEXTS, logits, trained

    from msnb.capture.cells import capture

    tokenizer, model = trained()  # the notebook's objects, trained on the CPU
    spec = capture("bert", HANDLER, list(POOL), namespace={"tokenizer": tokenizer, "model": model}, batch_size=8)
    module, context = served(spec, 0)
    assert {p.device for p in module.handle.model.parameters()} == {torch.device("cuda", 0)}
    answers, codes = send(module, context, TEXTS)
    assert codes == [200] * len(TEXTS)
    torch.testing.assert_close(
        torch.tensor([a["logits"] for a in answers]), logits(model, tokenizer, TEXTS), atol=1e-4, rtol=0
    )


def test_a_lora_model_trained_in_the_kernel_answers_from_the_gpu_like_the_notebook(served):
    pytest.importorskip("peft")
    from hf_models import HANDLER, LORA_POOL, TEXTS, logits, lora_model

    from msnb.capture.cells import capture

    tokenizer, model = lora_model()  # base + adapter, trained on the CPU
    spec = capture("lora", HANDLER, list(LORA_POOL), namespace={"tokenizer": tokenizer, "model": model})
    module, context = served(spec, 0)
    assert {p.device for p in module.handle.model.parameters()} == {torch.device("cuda", 0)}
    answers, codes = send(module, context, TEXTS)
    assert codes == [200] * len(TEXTS)
    torch.testing.assert_close(
        torch.tensor([a["logits"] for a in answers]), logits(model, tokenizer, TEXTS), atol=1e-4, rtol=0
    )
