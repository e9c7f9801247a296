"""Hermetic capture: local modules a handler imports travel with it, third-party imports are pinned (the bad inputs)."""

from __future__ import annotations

import os
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from msnb.capture.cells import capture
from msnb.capture.local_code import DATA_LIMIT, search_path
from msnb.errors import BuildError, CaptureError, HandlerRunError
from msnb.package.import_check import check_imports
from msnb.trial.runner import predict_in_process


def project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def cap(root: Path, cell: str, **config):
    return capture("m", textwrap.dedent(cell), [], search_path=search_path(root), **config)


def arcnames(spec) -> set[str]:
    return {f.arcname for f in spec.bundle}


PACKAGE = {
    "model.py": """
        import torch
        from mypkg.layers import Block

        class MyNetwork(torch.nn.Module):
            def __init__(self, in_dim, layer_dims):
                super().__init__()
                self.block = Block(in_dim, layer_dims[-1])

            def forward(self, x):
                return self.block(x)
        """,
    "mypkg/__init__.py": "from .layers import Block\n",
    "mypkg/layers.py": "import torch\nfrom . import util\n\nclass Block(torch.nn.Linear):\n    scale = util.SCALE\n",
    "mypkg/util.py": "from mypkg import layers  # circular: layers imports util\nSCALE = 2\n",
    "mypkg/sub/deep.py": "from ..util import SCALE\n",  # mypkg.sub is a namespace package (no __init__)
    "mypkg/vocab.txt": "a b c\n",
    "notused.py": "raise RuntimeError('never imported, never bundled')\n",
}
CELL = """
    import torch
    from model import MyNetwork
    import mypkg.sub.deep

    def init_function(in_dim, layer_dims):
        torch.manual_seed(0)
        return MyNetwork(in_dim, layer_dims)

    def preprocess(sample):
        return torch.tensor(sample, dtype=torch.float32)

    def postprocess(output):
        return {"n": len(output), "scale": mypkg.sub.deep.SCALE}
    """
KWARGS = {"in_dim": 3, "layer_dims": [16, 4]}


def test_local_modules_and_packages_travel_with_their_structure_and_load_like_a_worker(tmp_path):
    root = project(tmp_path / "nb", PACKAGE)
    spec = cap(root, CELL, init_kwargs=KWARGS)
    assert arcnames(spec) == {
        "model.py",
        "mypkg/__init__.py",
        "mypkg/layers.py",
        "mypkg/util.py",
        "mypkg/sub/deep.py",
        "mypkg/vocab.txt",
    }
    assert spec.bundled == ("model.py", "mypkg/ (5 files; data: vocab.txt)")
    assert not any("torch" in r for r in spec.requirements), "the serving image provides torch"
    assert predict_in_process(spec, [[1, 2, 3]]) == [{"n": 4, "scale": 2}]


def test_an_import_only_inside_a_function_is_found_like_a_module_level_one(tmp_path):
    root = project(tmp_path / "nb", {"helper.py": "def twice(x):\n    return 2 * x\n"})
    spec = cap(root, "def init_function():\n    import helper\n    return helper.twice(1)\n")
    assert arcnames(spec) == {"helper.py"}


def test_a_computed_import_name_is_a_warning(tmp_path):
    spec = cap(tmp_path, "import importlib\ndef init_function(name='x'):\n    return importlib.import_module(name)\n")
    assert any("computed name (name)" in w and "cannot be found statically" in w for w in spec.warnings)


def test_the_in_process_test_fails_like_the_server_for_a_module_that_cannot_be_bundled(tmp_path, monkeypatch):
    root = project(tmp_path / "nb", {"hidden_q1.py": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(root))
    import hidden_q1  # the kernel imported it: in-process it would pass without the worker-like import

    cell = "import importlib\ndef init_function(m='hidden_q1'):\n    return importlib.import_module(m).VALUE\n"
    spec = cap(root, cell)
    assert hidden_q1.VALUE == 1 and spec.bundle == ()
    with pytest.raises(HandlerRunError, match="No module named 'hidden_q1'") as err:
        predict_in_process(spec, [1])
    assert "imports the handler from the archive alone" in err.value.hint
    assert sys.modules["hidden_q1"] is hidden_q1, "the kernel's module is back after the test"


def test_a_local_module_that_shadows_an_installed_one_is_bundled_and_said(tmp_path):
    root = project(tmp_path / "nb", {"yaml.py": "def safe_load(text):\n    return text\n"})
    spec = cap(root, "import yaml\ndef init_function():\n    return yaml.safe_load('x')\n")
    assert arcnames(spec) == {"yaml.py"}
    assert not any(r.lower().startswith("pyyaml") for r in spec.requirements)
    assert any("shadows the installed distribution 'pyyaml'" in w.lower() for w in spec.warnings)


def test_third_party_imports_are_pinned_to_the_installed_version_and_given_requirements_win(tmp_path):
    cell = "import numpy\nimport yaml\nimport ts\ndef init_function():\n    return numpy.zeros(1)\n"
    spec = cap(tmp_path, cell)
    pins = {f"numpy=={metadata.version('numpy')}", f"pyyaml=={metadata.version('pyyaml')}"}
    assert {r.lower() for r in spec.requirements} == pins, "ts (TorchServe) is never written"
    mine = cap(tmp_path, cell, requirements=("numpy>=1.20",))
    assert [r.lower() for r in mine.requirements] == ["numpy>=1.20", f"pyyaml=={metadata.version('pyyaml')}"]


def test_an_uninstalled_third_party_import_warns_and_the_static_check_names_it(tmp_path):
    cell = "def init_function():\n    import cv2_not_installed_q3\n    return None\n"
    spec = cap(tmp_path, cell)
    assert any("`import cv2_not_installed_q3`" in w and "--requirements" in w for w in spec.warnings)
    with pytest.raises(BuildError, match="cv2_not_installed_q3") as err:
        check_imports(spec)
    assert "--requirements" in err.value.hint
    check_imports(cap(tmp_path, cell, requirements=("cv2-not-installed-q3==1.0",)))  # a requirement covers it


def test_a_package_folder_with_a_huge_file_is_refused_and_git_and_venv_folders_are_skipped(tmp_path):
    root = project(tmp_path / "nb", {"big/__init__.py": "", "big/.git/config": "x", "big/env/pyvenv.cfg": "x"})
    (root / "big" / "env" / "lib.bin").write_text("x")
    spec = cap(root, "import big\ndef init_function():\n    return big\n")
    assert arcnames(spec) == {"big/__init__.py"}
    with open(root / "big" / "weights.bin", "wb") as f:  # sparse: no disk space used
        f.truncate(DATA_LIMIT + 1)
    with pytest.raises(CaptureError, match="more data than msnb bundles") as err:
        cap(root, "import big\ndef init_function():\n    return big\n")
    assert "--extra-files" in err.value.hint


def test_a_locally_built_extension_is_bundled_with_a_platform_warning(tmp_path):
    import importlib.machinery

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"fastops{suffix}").write_bytes(b"\x7fELF")  # never loaded by capture
    spec = cap(tmp_path, "import fastops\ndef init_function():\n    return fastops\n")
    assert arcnames(spec) == {f"fastops{suffix}"}
    assert any("compiled extension" in w and "same platform" in w for w in spec.warnings)


def test_a_folder_with_thousands_of_files_sends_only_the_imported_module(tmp_path):
    home = project(tmp_path / "home", {"model.py": "X = 1\n"})
    for i in range(3000):
        (home / f"note{i}.txt").write_text("x")
    os.mkdir(home / ".cache")
    spec = cap(home, "import model\ndef init_function():\n    return model.X\n")
    assert arcnames(spec) == {"model.py"}


def test_an_editable_install_is_bundled_as_local_code_not_a_requirement(tmp_path):
    spec = cap(tmp_path, "import msnb.errors\ndef init_function():\n    return msnb.errors\n")
    assert {"msnb/__init__.py", "msnb/errors.py"} <= arcnames(spec)
    assert not any(r.lower().startswith("msnb") for r in spec.requirements)
