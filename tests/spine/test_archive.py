"""Building archives with the real torch-model-archiver API, and the build-time validation."""

from __future__ import annotations

import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import MLP_SOURCE

from msnb.errors import BuildError, HandlerRunError, SpecError
from msnb.package import archive, formats
from msnb.session.core import Session
from msnb.spec import spec_from_source
from msnb.templates import ARCHIVE_ROOMS, runtime_files
from msnb.trial.runner import predict_in_process


def validated_build(spec, export_path, fmt=formats.EXPORT_FORMAT):
    """What %ms_build and msnb.build do: run the handler on its example in-process, then pack."""
    return Session().build(spec, export_path, fmt=fmt)


def _manifest(mar):
    with zipfile.ZipFile(mar) as z:
        return json.loads(z.read("MAR-INF/MANIFEST.json")), set(z.namelist()), z


def test_standard_mar_holds_handler_shared_modules_config_and_checkpoint(tmp_path, mlp_spec):
    ckpt = tmp_path / "weights.pt"
    torch.manual_seed(1)
    model = spec_module_model(mlp_spec)
    torch.save(model.state_dict(), ckpt)
    spec = mlp_spec.replace(checkpoint=str(ckpt), version="2.1", requirements=("numpy",))
    mar = validated_build(spec, tmp_path / "out", fmt="mar")
    manifest, names, _ = _manifest(mar)
    assert mar == tmp_path / "out" / "mlp.mar"
    assert manifest["model"] == {
        "modelName": "mlp",
        "handler": "handler_model.py",
        "modelVersion": "2.1",
        "serializedFile": "model.pt",
        "requirementsFile": "requirements.txt",
        "configFile": "model-config.yaml",
    }
    assert {
        "handler_model.py",
        "msnb_runtime/handler/handler.py",
        "model-config.yaml",
        "model.pt",
        "requirements.txt",
    } <= names
    assert {inside for _, inside in runtime_files(ARCHIVE_ROOMS)} <= names
    with zipfile.ZipFile(mar) as z:
        assert z.getinfo("model.pt").compress_type == zipfile.ZIP_DEFLATED
        assert b"handle = _msnb_handler_factory(" in z.read("handler_model.py")


def test_zip_store_is_uncompressed_and_no_archive_is_a_folder(tmp_path, mlp_spec):
    spec = mlp_spec.replace(checkpoint=spec_module_model(mlp_spec))
    mar = archive.build(spec, tmp_path, fmt="zip-store", archive_name="mlp-dev")
    with zipfile.ZipFile(mar) as z:
        assert z.getinfo("model.pt").compress_type == zipfile.ZIP_STORED
    folder = validated_build(spec, tmp_path, fmt="no-archive")
    assert (folder / "MAR-INF" / "MANIFEST.json").is_file()
    assert (folder / "handler_model.py").is_file() and (folder / "model.pt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp", "mlp-dev.mar"]  # no partial files left


def test_live_module_checkpoint_is_saved_as_state_dict(tmp_path, mlp_spec):
    model = spec_module_model(mlp_spec)
    with torch.no_grad():
        model.fc2.weight.zero_()
        model.fc2.bias.fill_(5.0)
    spec = mlp_spec.replace(checkpoint=model)
    mar = validated_build(spec, tmp_path, fmt="mar")
    with zipfile.ZipFile(mar) as z:
        state = torch.load(io.BytesIO(z.read("model.pt")), weights_only=True)
    assert torch.equal(state["fc2.bias"], torch.full((3,), 5.0))
    answers = predict_in_process(spec, [{"x": [0, 0, 0, 0]}])
    assert answers[0]["scores"] == pytest.approx([5.0, 5.0, 5.0], abs=1e-3)


def test_missing_checkpoint_names_the_resolved_path(tmp_path, mlp_spec):
    with pytest.raises(SpecError, match="does not exist") as err:
        validated_build(mlp_spec.replace(checkpoint=str(tmp_path / "nope.pt")), tmp_path / "out")
    assert str(tmp_path / "nope.pt") in str(err.value) and "Hint:" in str(err.value)
    assert not (tmp_path / "out" / "mlp.mar").exists()


def test_checkpoint_that_is_not_a_state_dict_is_refused_at_build(tmp_path, mlp_spec):
    ckpt = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), ckpt)
    with pytest.raises(HandlerRunError, match="state_dict"):
        validated_build(mlp_spec.replace(checkpoint=str(ckpt)), tmp_path / "out")


def test_checkpoint_with_wrong_keys_names_missing_and_unexpected(tmp_path, mlp_spec):
    ckpt = tmp_path / "other.pt"
    torch.save({"fc1.weight": torch.zeros(8, 4), "encoder.weight": torch.zeros(2)}, ckpt)
    with pytest.raises(HandlerRunError) as err:
        validated_build(mlp_spec.replace(checkpoint=str(ckpt)), tmp_path / "out")
    text = str(err.value)
    assert "fc2.weight" in text and "encoder.weight" in text
    assert "Hint:" in text


def test_init_function_not_returning_a_module_is_refused_before_building(tmp_path):
    spec = spec_from_source("bad", "def init_function():\n    return 42\n")
    with pytest.raises(HandlerRunError, match="nn.Module"):
        validated_build(spec, tmp_path / "out")
    assert not (tmp_path / "out" / "bad.mar").exists()


def test_example_the_handler_rejects_fails_the_build_with_the_handlers_message(tmp_path, mlp_spec):
    with pytest.raises(HandlerRunError, match="'x' must hold 4 numbers"):
        validated_build(mlp_spec.replace(example={"x": [1, 2]}), tmp_path / "out")


def test_extra_files_archive_with_traversal_is_refused_and_writes_nothing_outside(tmp_path, mlp_spec):
    evil = tmp_path / "deps.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        data = b"owned"
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(HandlerRunError, match=r"\.\./escaped.txt|outside"):
        validated_build(mlp_spec.replace(extra_files=(str(evil),)), tmp_path / "out")
    assert not any(p.name == "escaped.txt" for p in tmp_path.rglob("*"))


@pytest.mark.parametrize(
    "names", [["model.pt"], ["model-config.yaml"], ["msnb_runtime"], ["a/labels.txt", "b/labels.txt"]]
)
def test_an_extra_file_that_would_replace_another_file_is_refused(tmp_path, names):
    paths = []
    for name in names:
        path = tmp_path / "extras" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        paths.append(str(path))
    spec = spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, extra_files=tuple(paths))
    with pytest.raises(SpecError, match=rf"would replace .* \('{Path(names[-1]).name}'\)[\s\S]*Hint: rename it"):
        archive.build(spec, tmp_path / "out", fmt="mar")
    assert not list((tmp_path / "out").glob("*.mar"))


def test_extra_files_archive_is_unpacked_keeping_folders(tmp_path):
    deps = tmp_path / "deps.zip"
    with zipfile.ZipFile(deps, "w") as z:
        z.writestr("vocab/words.txt", "a\nb\nc\n")
    source = (
        "import os, torch\n"
        "def init_function():\n"
        "    return torch.nn.Identity()\n"
        "def postprocess(output):\n"
        "    here = os.path.dirname(os.path.abspath(__file__))\n"
        "    return open(os.path.join(here, 'vocab', 'words.txt')).read().split()\n"
        "def preprocess(sample):\n"
        "    return torch.tensor(sample)\n"
    )
    spec = spec_from_source("vocab", source, extra_files=(str(deps),))
    assert predict_in_process(spec, [[1.0]]) == [["a", "b", "c"]]


def test_unwritable_output_folder_is_a_clear_error(tmp_path, mlp_spec):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(BuildError, match="Cannot write to the output folder"):
        validated_build(mlp_spec, blocker / "out")


def test_unknown_format_is_refused(tmp_path, mlp_spec):
    with pytest.raises(BuildError, match="zip-store"):
        validated_build(mlp_spec, tmp_path, fmt="tar")


def spec_module_model(spec):
    namespace: dict = {}
    exec(compile(MLP_SOURCE, "mlp", "exec"), namespace)
    return namespace["init_function"](**spec.init_kwargs)


DATACLASS_HANDLER = """
import dataclasses
import pickle
import sys

import torch


@dataclasses.dataclass
class Options:
    scale: "float" = 2.0  # a string annotation: dataclasses look the module up in sys.modules


def init_function():
    return torch.nn.Identity()


def preprocess(sample):
    options = pickle.loads(pickle.dumps(Options()))  # pickle finds the class through its module, too
    return torch.tensor(sample, dtype=torch.float32) * options.scale


def postprocess(output):
    return output.tolist()
"""


def test_handler_code_that_needs_its_module_registered_runs_in_process_as_in_a_worker(tmp_path):
    spec = spec_from_source("dc", DATACLASS_HANDLER, example=[1.0, 2.0])
    before = set(sys.modules)
    assert predict_in_process(spec, [[1.0, 2.0]]) == [[2.0, 4.0]]
    assert validated_build(spec, tmp_path, fmt="no-archive")  # validation loads it too
    assert not {m for m in set(sys.modules) - before if m.startswith("msnb_local_")}  # taken out again
