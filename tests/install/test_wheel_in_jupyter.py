"""The wheel installs into a clean environment that already has JupyterLab, and the README's quickstart runs
there, as written, through a real Jupyter kernel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from helpers import build_wheel
from venvs import install, pip_install

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 1500  # torch and JupyterLab unpacked into a fresh venv; on Python 3.13 torch is PyPI's CUDA build

# After the README's cells: the served answer equals plain torch on the same weights and input, and every
# msnb that ran came from the clean environment, not from the source tree.
CHECK_CELL = """\
import sys
from pathlib import Path
expected = init_function()(torch.tensor([0.5, -1.0, 2.0, 0.1]))
assert answer == {"label": int(expected.argmax()), "scores": expected.tolist()}, (answer, expected)
import msnb
assert Path(msnb.__file__).is_relative_to(sys.prefix), msnb.__file__
print("quickstart ok")
"""


def quickstart_cells(markdown: str) -> list[str]:
    """The python code blocks of a page's "Quickstart" section, in order."""
    section = re.search(r"^#+ Quickstart\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert section, "no Quickstart section"
    return [block.strip() for block in re.findall(r"```python\n(.*?)```", section.group(1), re.S)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def jupyter_env(tmp_path_factory, wheel) -> Path:
    """A fresh venv of this test's Python with JupyterLab (prepared as the test run prepares environments:
    ``venvs.install``), then `pip install msnb.whl` as a user runs it; returns its python."""
    venv = tmp_path_factory.mktemp("clean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install(python, "-c", str(ROOT / "constraints.txt"), "jupyterlab", timeout=INSTALL_TIMEOUT_S)
    pip_install(python, "-c", str(ROOT / "constraints.txt"), str(wheel), timeout=INSTALL_TIMEOUT_S)
    return python


def test_the_readme_quickstart_is_the_docs_quickstart():
    readme = quickstart_cells((ROOT / "README.md").read_text())
    assert readme[0] == "%load_ext msnb" and len(readme) == 3
    assert quickstart_cells((ROOT / "docs" / "quickstart.md").read_text()) == readme


def test_the_wheel_carries_the_templates_and_the_example_notebooks(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {f"msnb/templates/{p.name}" for p in (ROOT / "templates").iterdir() if p.suffix in {".py", ".tmpl"}}
    examples = {f"msnb/examples/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert templates and examples and (templates | examples) <= names, sorted((templates | examples) - names)


@pytest.mark.timeout(INSTALL_TIMEOUT_S * 2)
def test_the_readme_quickstart_runs_in_a_clean_jupyter_with_the_wheel(jupyter_env, tmp_path):
    cells = [*quickstart_cells((ROOT / "README.md").read_text()), CHECK_CELL]
    notebook = tmp_path / "quickstart.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), notebook)
    jupyter = jupyter_env.parent / "jupyter"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(
        [str(jupyter), "execute", "--inplace", "--timeout=300", str(notebook)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = [o.get("text", "") for c in nbformat.read(notebook, as_version=4).cells for o in c.get("outputs", [])]
    assert any("quickstart ok" in text for text in outputs), outputs
