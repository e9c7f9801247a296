"""The reload path is dev-only and decided from the spec: exported archives carry none of it; the dev entry
swaps generations in-process with TorchServe's own Context, refuses a wrong secret and keeps the old code on failure."""

from __future__ import annotations

import sys
import zipfile

import pytest
import torch
from helpers import MLP_MODEL, mlp_model
from ts.context import Context, RequestProcessor

from msnb.engines.models import ModelStatus
from msnb.package import archive
from msnb.package.model_folder import ModelFolder
from msnb.session.reload import DEV_ENTRY, DevModel, checkpoint_identity, install, mark_current, refusal
from msnb.spec import spec_from_source
from msnb.templates import shared_handler_files
from msnb.templates.msnb_runtime.dev import reload
from msnb.templates.msnb_runtime.handler.names import CHECKPOINT
from msnb.trial.runner import predict_in_process

SAMPLE = {"x": [1.0, -2.0, 0.5, 3.0]}


def source(tag: int, init_line: str = "") -> str:
    body = MLP_MODEL.replace("    torch.manual_seed(0)\n", f"    torch.manual_seed(0)\n{init_line}")
    return body + (
        "\ndef preprocess(sample):\n    return torch.tensor(sample['x'], dtype=torch.float32)\n\n"
        f"def postprocess(output):\n    return {{'tag': {tag}, 'label': int(output.argmax())}}\n"
    )


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "mlp.pt"
    torch.save(mlp_model(8).state_dict(), path)
    return str(path)


def known(spec) -> DevModel:
    status = ModelStatus(spec.name, spec.version, True, ())
    return DevModel(spec, status, None, "s", pid=42, weights=checkpoint_identity(spec))


def test_a_built_mar_holds_no_reload_machinery(tmp_path, ckpt):
    mar = archive.build(spec_from_source("mlp", source(1), checkpoint=ckpt), tmp_path, fmt="mar")
    with zipfile.ZipFile(mar) as zf:
        names = zf.namelist()
        text = b"".join(zf.read(n) for n in names if n.endswith((".py", ".json")))
    assert DEV_ENTRY not in names and reload.SECRET_FILE not in names
    assert not any(n.startswith(reload.GENERATIONS) for n in names)
    assert b"dev_reload" not in text and reload.RELOAD_HEADER.encode() not in text
    assert all(p.name != DEV_ENTRY for p in shared_handler_files())


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"batch_size": 4}, "--batch-size"),
        ({"workers": 2}, "workers"),
        ({"device": "gpu"}, "--device"),
        ({"version": "2.0"}, "--version"),
        ({"requirements": ("packaging==24.0",)}, "requirements"),
        ({"response_timeout": 30}, "--response-timeout"),
    ],
)
def test_an_edit_beyond_code_is_not_a_reload(ckpt, change, why):
    served = spec_from_source("mlp", source(1), checkpoint=ckpt)
    assert why in refusal(known(served), spec_from_source("mlp", source(2), checkpoint=ckpt, **change), 42)


def test_a_code_or_init_kwargs_edit_is_a_reload_and_a_restart_is_not(ckpt):
    served = spec_from_source("mlp", source(1), checkpoint=ckpt)
    assert (
        refusal(known(served), spec_from_source("mlp", source(2), checkpoint=ckpt, init_kwargs={"hidden": 8}), 42)
        is None
    )
    assert refusal(known(served), spec_from_source("mlp", source(2), checkpoint=ckpt), 43) == "the server was restarted"
    assert refusal(None, served, 42) == "first deploy"


def test_a_changed_checkpoint_is_not_a_reload(tmp_path, ckpt):
    served = spec_from_source("mlp", source(1), checkpoint=mlp_model(8).state_dict())
    other = torch.nn.Linear(4, 3).state_dict()
    assert "checkpoint" in refusal(known(served), spec_from_source("mlp", source(1), checkpoint=other), 42)


def test_a_live_model_trained_in_place_after_serving_takes_a_new_version_as_the_docs_say():
    model = mlp_model(8)
    served = known(spec_from_source("mlp", source(1), checkpoint=model))
    with torch.no_grad():
        model.fc1.weight.add_(1.0)  # retrained in the notebook: the same object, new weights
    why = refusal(served, spec_from_source("mlp", source(1), checkpoint=model), 42)
    assert why == "the checkpoint changed (new weights)"  # docs/edit-loop.md: new weights are a new version


def context(model_dir, headers: list[dict]) -> Context:
    ctx = Context("mlp", str(model_dir), {"model": {"serializedFile": CHECKPOINT}}, 1, None, "0.12.0")
    ctx.request_processor = [RequestProcessor(h) for h in headers]
    ctx.request_ids = {i: str(i) for i in range(len(headers))}
    return ctx


@pytest.fixture
def served_dir(tmp_path, ckpt):
    """A model folder as the local server registers it: built, with the dev entry installed."""
    folder = archive.build(spec_from_source("mlp", source(1), checkpoint=ckpt), tmp_path / "store", fmt="no-archive")
    return folder, install(folder)


@pytest.fixture
def entry():
    """A dev entry loaded in this process; its generation's modules leave sys.modules afterwards."""
    made = reload.DevEntry()
    yield made
    if made.current is not None:
        for name, module in made.current.modules.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
        reload.release(made.current)


def test_the_dev_entry_swaps_generations_and_refuses_a_wrong_secret(served_dir, ckpt, entry):
    folder, secret = served_dir
    entry(None, context(folder, []))
    assert entry([{"body": SAMPLE}], context(folder, [{}]))[0]["tag"] == 1
    edited = spec_from_source("mlp", source(2), checkpoint=ckpt)
    ModelFolder.stage(edited, folder / reload.GENERATIONS / "2")
    wrong = context(folder, [{reload.RELOAD_HEADER: "guess"}, {}])
    refused = entry([{"body": {"generation": 2}}, {"body": SAMPLE}], wrong)
    assert wrong.get_response_status(0)[0] == 403 and "refused" in refused[0]["error"]
    assert refused[1]["tag"] == 1  # the rest of the batch is answered as usual
    ok = entry([{"body": {"generation": 2}}], context(folder, [{reload.RELOAD_HEADER: secret}]))
    assert ok[0]["generation"] == 2
    assert entry([{"body": SAMPLE}], context(folder, [{}])) == predict_in_process(edited, [SAMPLE])


def test_a_generation_that_fails_to_load_leaves_the_old_one_serving(served_dir, ckpt, entry):
    folder, secret = served_dir
    entry(None, context(folder, []))
    broken = spec_from_source("mlp", source(2, "    raise RuntimeError('no weights today')\n"), checkpoint=ckpt)
    ModelFolder.stage(broken, folder / reload.GENERATIONS / "2")
    ctx = context(folder, [{reload.RELOAD_HEADER: secret}])
    failed = entry([{"body": {"generation": 2}}], ctx)[0]
    assert ctx.get_response_status(0)[0] == 500 and "no weights today" in failed["error"] and failed["hint"]
    assert entry([{"body": SAMPLE}], context(folder, [{}]))[0]["tag"] == 1


def test_a_restarted_worker_loads_the_current_generation(served_dir, ckpt, entry):
    folder, _ = served_dir
    ModelFolder.stage(spec_from_source("mlp", source(7), checkpoint=ckpt), folder / reload.GENERATIONS / "7")
    mark_current(folder, 7)
    entry(None, context(folder, []))
    assert entry([{"body": SAMPLE}], context(folder, [{}]))[0]["tag"] == 7
