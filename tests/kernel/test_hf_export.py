"""`msnb export --execute` of the Hugging Face example notebook: its saved objects served by a TorchServe from a clean
environment (only torch and TorchServe; transformers comes from the archive's requirements), answering like the
notebook; a plain export refuses them; without the requirement the clean side shows the import error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch
from helpers import CLEAN_PYTHON_GROUP
from make_notebooks import NOTEBOOKS
from test_hermetic_notebook import MSNB

from msnb.engines.torchserve import LocalServer
from msnb.templates.msnb_runtime.handler.names import HF_DIR

pytest.importorskip("transformers")
pytestmark = pytest.mark.kernel
NAME = "bert_sentiment"
# The notebook's own answers, written by one more cell above the handler cell (it reads the kernel's answers, so
# `--execute` runs it among the cells the handler needs): plain transformers on the kernel's objects.
SERVING = ("%ms_serve", "%ms_predict", "%ms_stop")
SAVE_EXPECTED = 'json.dump({"texts": texts, "logits": expected.tolist()}, open("expected.json", "w"))'


def example(folder: Path) -> Path:
    """The example notebook, without its own serving cells (tests/kernel/test_notebooks.py runs those)."""
    nb = nbformat.read(NOTEBOOKS / "hf_text_classifier.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if not any(m in c.source for m in SERVING)]
    at = next(i for i, c in enumerate(nb.cells) if "%load_ext msnb" in c.source)
    nb.cells.insert(at, nbformat.v4.new_code_cell(SAVE_EXPECTED))
    folder.mkdir(parents=True)
    nbformat.write(nb, str(folder / "hf_text_classifier.ipynb"))
    return folder / "hf_text_classifier.ipynb"


def msnb(*args, cwd: Path) -> subprocess.CompletedProcess:
    (cwd / "home").mkdir(exist_ok=True)
    short = tempfile.mkdtemp(prefix="hfx-")  # the kernel's and the workers' sockets live under TMPDIR
    env = {**os.environ, "HOME": str(cwd / "home"), "TMPDIR": short}
    try:
        return subprocess.run([MSNB, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_plain_export_refuses_the_objects_with_the_hint_to_execute(tmp_path):
    done = msnb("export", example(tmp_path / "nb"), "-o", "store", cwd=tmp_path)
    assert done.returncode == 1
    assert "`model`" in done.stderr and "`tokenizer`" in done.stderr and "msnb export --execute" in done.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.server
@pytest.mark.xdist_group(CLEAN_PYTHON_GROUP)
@pytest.mark.timeout(1800)
@pytest.mark.one_python
def test_export_execute_then_a_clean_torchserve_answers_like_the_notebook(tmp_path, clean_python):
    nb = example(tmp_path / "nb")
    done = msnb("export", nb, "--execute", "-o", "store", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    mar = tmp_path / "store" / f"{NAME}.mar"
    with zipfile.ZipFile(mar) as z:
        names, requirements = z.namelist(), z.read("requirements.txt").decode()
    assert f"{HF_DIR}/model/model.safetensors" in names and f"{HF_DIR}/tokenizer/tokenizer.json" in names
    assert not [n for n in names if n.endswith((".bin", ".pkl", ".pt", ".pth"))]
    assert all(f"{p}==" in requirements for p in ("transformers", "tokenizers", "safetensors")), requirements
    expected = json.loads((nb.parent / "expected.json").read_text())
    with LocalServer(tmp_path / "server", python=clean_python) as server:
        server.register(mar)  # TorchServe pip-installs requirements.txt into the model dir
        answers = server.predict_many(NAME, expected["texts"])
    got = torch.tensor([a["logits"] for a in answers])
    torch.testing.assert_close(got, torch.tensor(expected["logits"]), atol=1e-4, rtol=0)

    # Without its requirements the clean side cannot import the class: the worker's error says so.
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(mar) as z:
        z.extractall(unpacked)
    shutil.rmtree(unpacked / "MAR-INF")
    failed = subprocess.run(
        [clean_python, "-c", "import handler_model"], cwd=unpacked, capture_output=True, text=True, timeout=300
    )
    assert failed.returncode != 0
    assert "ObjectLoadError" in failed.stderr and "No module named 'transformers'" in failed.stderr
    assert "Hint: install the requirements of the archive (transformers" in failed.stderr
