"""Execute a notebook in a real Jupyter kernel (nbclient) in a scratch folder; read back its printed prediction."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

PREDICTION_PREFIX = "prediction: "  # what every example notebook prints before its final TorchServe answer
CELL_TIMEOUT_S = 60  # nbclient stalls intermittently for a whole cell timeout (FACTS.md): never assert on time


def execute_notebook(
    path: str | Path,
    workdir: str | Path,
    timeout: int = CELL_TIMEOUT_S,
    shutdown: str = "graceful",
    tmpdir: Path | None = None,
) -> nbformat.NotebookNode:
    """Copy ``path`` into ``workdir`` and run it there (the kernel's cwd); returns the executed notebook.

    ``shutdown="immediate"`` kills the kernel at the end instead of asking it to exit. ``tmpdir`` is the
    kernel's TMPDIR, kept for the caller to inspect (default: a fresh one, deleted afterwards).
    HOME, TMPDIR and IPYTHONDIR point into ``workdir`` so Jupyter and TorchServe write nothing elsewhere.
    A cell error raises AssertionError with the cell's traceback and the msnb errors shown before it.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / Path(path).name
    shutil.copy2(path, copy)
    nb = nbformat.read(copy, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        shutdown_kernel=shutdown,
        resources={"metadata": {"path": str(workdir)}},
    )
    try:
        with _scratch_env(workdir, tmpdir):
            client.execute()
    except CellExecutionError as err:  # a failing magic fails its cell: report it with the msnb errors shown above
        raise AssertionError(f"msnb errors shown before the failing cell: {error_outputs(nb)}\n{err}") from None
    finally:  # kept for a failing run too: the outputs above the failing cell explain it
        nbformat.write(nb, workdir / f"executed-{copy.name}")
    return nb


def printed_prediction(nb: nbformat.NotebookNode) -> Any:
    """The JSON value a notebook printed after ``prediction: `` (its last real TorchServe answer)."""
    found = [
        line[len(PREDICTION_PREFIX) :]
        for text in stream_texts(nb)
        for line in text.splitlines()
        if line.startswith(PREDICTION_PREFIX)
    ]
    if not found:
        raise AssertionError(f"no line starting with {PREDICTION_PREFIX!r} in the notebook's outputs")
    return json.loads(found[-1])


def stream_texts(nb: nbformat.NotebookNode) -> list[str]:
    return [out.get("text", "") for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "stream"]


def error_outputs(nb: nbformat.NotebookNode) -> list[str]:
    """Tracebacks and msnb error displays (a failing magic shows its message, then fails its cell) in the notebook."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append(f"{out.ename}: {out.evalue}")
            elif "msnb-error" in str(out.get("data", {}).get("text/html", "")):
                found.append(str(out["data"].get("text/plain")))
    return found


class _scratch_env:
    """Set HOME/TMPDIR/IPYTHONDIR for the kernel nbclient starts (it inherits this process's environment).

    TMPDIR is a fresh short folder, not one inside ``workdir``: TorchServe's worker sockets live under
    it and a Unix socket path longer than ~107 bytes fails ("AF_UNIX path too long").
    """

    def __init__(self, workdir: Path, tmpdir: Path | None = None):
        self.values = {k: str(workdir / d) for k, d in (("HOME", "home"), ("IPYTHONDIR", "ipython"))}
        self.given = tmpdir

    def __enter__(self):
        self.tmp = str(self.given) if self.given else tempfile.mkdtemp(prefix="msnb-nb-")
        self.values["TMPDIR"] = self.tmp
        self.saved = {k: os.environ.get(k) for k in self.values}
        for key, value in self.values.items():
            Path(value).mkdir(parents=True, exist_ok=True)
            os.environ[key] = value

    def __exit__(self, *exc):
        if not self.given:
            shutil.rmtree(self.tmp, ignore_errors=True)
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
