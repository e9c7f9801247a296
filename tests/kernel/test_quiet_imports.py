"""Importing TorchServe in a notebook with msnb loaded prints none of its optional-backend notices in red."""

from __future__ import annotations

import nbformat
from nbrun import execute_notebook

from msnb.ui.quiet import OPTIONAL_BACKEND_NOTICES


def stderr_of(nb: nbformat.NotebookNode) -> str:
    return "".join(
        out.get("text", "")
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if out.output_type == "stream" and out.get("name") == "stderr"
    )


def test_importing_ts_after_load_ext_shows_no_backend_noise_but_other_warnings_still_show(tmp_path):
    cells = [
        "%load_ext msnb",
        "from ts.torch_handler.base_handler import BaseHandler",
        "import logging\nlogging.getLogger('ts.torch_handler.base_handler').warning('a warning that matters')",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(nb, tmp_path / "quiet.ipynb")
    stderr = stderr_of(execute_notebook(tmp_path / "quiet.ipynb", tmp_path / "run"))
    assert not [notice for notice in OPTIONAL_BACKEND_NOTICES if notice in stderr], stderr
    assert "a warning that matters" in stderr
