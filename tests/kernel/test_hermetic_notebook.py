"""A notebook whose model lives in a .py file beside it: tested in a real kernel, exported from elsewhere, served by
a TorchServe from a clean environment (only torch and TorchServe), answering exactly like the notebook."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from helpers import CLEAN_PYTHON_GROUP, OWN_CAPTUM_REPORT, torch_packages
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbrun import _scratch_env, execute_notebook, printed_prediction

from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.engines.torchserve import LocalServer
from msnb.package import archive

pytestmark = pytest.mark.kernel
MSNB = str(Path(sys.executable).with_name("msnb"))

MODEL_PY = """
    import torch
    from mypkg.layers import Block

    class MyNetwork(torch.nn.Module):
        def __init__(self, in_dim, layer_dims):
            super().__init__()
            self.blocks = torch.nn.Sequential(*[Block(a, b) for a, b in zip([in_dim, *layer_dims], layer_dims)])

        def forward(self, x):
            return self.blocks(x)
    """
FILES = {
    "model.py": MODEL_PY,
    "mypkg/__init__.py": "",
    "mypkg/layers.py": "import torch\nfrom .scale import SCALE\n\nclass Block(torch.nn.Linear):\n    scale = SCALE\n",
    "mypkg/scale.py": "SCALE = 1.0\n",
    "labels.json": '["cat", "dog", "bird"]',
}
HANDLER = """%%ms_handler hermetic --init-kwargs '{"in_dim": 4, "layer_dims": [8, 3]}' --extra-files labels.json --example '[1, 2, 3, 4]'
import functools
import json

import six
import torch
from model import MyNetwork

@functools.cache
def labels():
    with open("labels.json") as f:
        return json.load(f)

def init_function(in_dim, layer_dims):
    torch.manual_seed(0)
    return MyNetwork(in_dim, layer_dims)

def preprocess(sample):
    return torch.tensor(sample, dtype=torch.float32)

def postprocess(output):
    return {"label": labels()[int(output.argmax())], "text": six.ensure_str(b"ok")}
"""


def notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def test_a_failing_msnb_cell_stops_nbclient_and_shows_only_the_message(tmp_path):
    nb = nbformat.read(
        notebook(tmp_path / "stop.ipynb", "%load_ext msnb", "%ms_test nosuch_handler --data '[1]'", "print('after')"),
        as_version=4,
    )
    client = NotebookClient(nb, kernel_name="python3", timeout=60, resources={"metadata": {"path": str(tmp_path)}})
    with _scratch_env(tmp_path), pytest.raises(CellExecutionError) as err:
        client.execute()
    assert "No handler named 'nosuch_handler'" in str(err.value)
    (error,) = nb.cells[1].outputs
    shown = "\n".join(error.traceback)
    assert error.output_type == "error" and "Hint: run its %%ms_handler cell first" in shown
    assert "Traceback" not in shown and "site-packages" not in shown and "msnb/" not in shown
    assert nb.cells[2].outputs == [], "Run All stopped at the failing cell"


@pytest.mark.server
@pytest.mark.xdist_group(CLEAN_PYTHON_GROUP)
@pytest.mark.timeout(900)
@pytest.mark.one_python
def test_local_code_travels_and_a_clean_torchserve_answers_like_the_notebook(tmp_path, clean_python):
    project = tmp_path / "proj"
    for name, text in FILES.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(textwrap.dedent(text))
    source = notebook(
        tmp_path / "src" / "hermetic.ipynb",
        "%load_ext msnb",
        HANDLER,
        "answer = %ms_test hermetic\nprint('prediction: ' + json.dumps(answer))",
    )
    executed = execute_notebook(source, project)
    printed = printed_prediction(executed)
    assert printed["label"] in ("cat", "dog", "bird") and printed["text"] == "ok"
    summary = "\n".join(str(o.get("data", {}).get("text/plain", "")) for o in executed.cells[1].outputs)
    assert "model.py" in summary and "mypkg/ (3 files)" in summary

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [MSNB, "export", str(project / "hermetic.ipynb"), "-o", "store"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "model.py, mypkg/ (3 files)" in done.stdout
    with LocalServer(tmp_path / "server", python=clean_python) as server:
        status = server.register(elsewhere / "store" / "hermetic.mar")
        assert server.predict(status.name, [1, 2, 3, 4]) == printed


@pytest.mark.server
@pytest.mark.xdist_group(CLEAN_PYTHON_GROUP)
@pytest.mark.timeout(900)
@pytest.mark.one_python
def test_a_clean_torchserve_installs_only_what_it_lacks_for_a_captum_handler_never_a_second_torch(
    tmp_path, clean_python
):
    spec = capture("ct", OWN_CAPTUM_REPORT, [], search_path=search_path(tmp_path))
    mar = archive.build(spec, tmp_path / "store", fmt=archive.EXPORT_FORMAT)
    server_torch = subprocess.run(
        [clean_python, "-c", "import torch; print(torch.__version__, torch.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    with LocalServer(tmp_path / "server", python=clean_python) as server:
        server.register(mar)  # the clean environment has no captum: TorchServe installs it, and only it
        answer = server.predict("ct", {"x": 1})
        assert [answer["torch"], answer["file"]] == server_torch
        assert torch_packages(answer["model_dir"]) == [], "captum's torch requirement was met by the server's torch"
        installed = Path(answer["model_dir"]) / "venv"
        assert list(installed.glob("lib/python*/site-packages/captum/__init__.py")), "captum went to the model venv"
