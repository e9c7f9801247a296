"""What msnb writes runs without msnb: a freshly built .mar's model folder, a KServe folder's archive and a Ray Serve
export each import the runtime package (``msnb_runtime``) from their own folder, in a clean environment with only
torch and TorchServe (``clean_env``), and for the Ray export Ray Serve besides, where msnb is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import venv
import zipfile
from pathlib import Path

import nbformat
import pytest
from helpers import CLEAN_PYTHON_GROUP
from venvs import install

from msnb.cli.export import export_notebook
from msnb.engines.ray import RAY_VERSION

pytestmark = [pytest.mark.kernel, pytest.mark.xdist_group(CLEAN_PYTHON_GROUP)]
ROOT = Path(__file__).resolve().parents[2]
HANDLER = """%%ms_handler alone --example '[1.0, 2.0]'
import torch

def init_function():
    return torch.nn.Linear(2, 1)
"""
# One import in the folder it is run from: msnb is not there to be found, the runtime package is the folder's own.
IMPORT = """
import importlib, importlib.util, json, sys
assert importlib.util.find_spec("msnb") is None, "msnb is installed here"
for module in sys.argv[1:]:
    importlib.import_module(module)
import msnb_runtime
print(json.dumps(msnb_runtime.__file__))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A notebook's handler exported as a .mar (OUT/store), KServe's layout (OUT/kserve) and Ray Serve's (OUT/ray)."""
    root = tmp_path_factory.mktemp("runtime-alone")
    notebook = root / "alone.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(HANDLER)]), notebook)
    report = export_notebook(notebook, root / "store", kserve=root / "kserve", ray=root / "ray")
    assert report.ok, report.failed
    return root


@pytest.fixture(scope="module")
def ray_python(clean_python, tmp_path_factory) -> Path:
    """The clean environment with Ray Serve added, in an environment of its own layered on it (a ``.pth`` file puts
    the clean one's site-packages after its own): the clean environment itself stays torch and TorchServe only."""
    root = tmp_path_factory.mktemp("clean-ray") / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    clean = next(clean_python.parent.parent.glob("lib/python*/site-packages"))
    (next(root.glob("lib/python*/site-packages")) / "clean-env.pth").write_text(f"{clean}\n")
    python = root / "bin" / "python"
    install(python, "-c", str(ROOT / "constraints.txt"), f"ray[serve]=={RAY_VERSION}", timeout=900)
    return python


def imported_alone(python: Path, folder: Path, *modules: str) -> Path:
    """Import ``modules`` with ``python`` from ``folder`` (one process, nothing of this environment on its path);
    where its ``msnb_runtime`` came from."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(
        [str(python), "-c", IMPORT, *modules], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(json.loads(done.stdout.strip().splitlines()[-1]))


def unpacked(archive: Path, into: Path) -> Path:
    """The model folder a TorchServe worker imports from: the archive's files (its MAR-INF aside)."""
    with zipfile.ZipFile(archive) as z:
        z.extractall(into)
    return into


def test_a_fresh_mar_imports_its_own_runtime_without_msnb(exported, clean_python, tmp_path):
    folder = unpacked(exported / "store" / "alone.mar", tmp_path / "mar")
    found = imported_alone(clean_python, folder, "handler_model", "msnb_runtime.handler.handler")
    assert found.is_relative_to(folder), found


def test_a_kserve_folders_archive_imports_its_own_runtime_without_msnb(exported, clean_python, tmp_path):
    folder = unpacked(exported / "kserve" / "model-store" / "alone.mar", tmp_path / "kserve")
    found = imported_alone(clean_python, folder, "handler_model", "msnb_runtime.handler.envelope")
    assert found.is_relative_to(folder), found


def test_a_ray_export_imports_its_own_runtime_without_msnb(exported, ray_python):
    folder = exported / "ray"
    found = imported_alone(ray_python, folder, "msnb_runtime.ray.app")
    assert found.is_relative_to(folder), found
