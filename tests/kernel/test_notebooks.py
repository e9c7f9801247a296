"""Every example notebook runs top to bottom in a real Jupyter kernel and ends with a real TorchServe prediction;
`msnb export` of the same notebook, served on a fresh TorchServe, answers what the executed notebook printed."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import psutil
import pytest
from helpers import poll
from make_notebooks import ALL, NOTEBOOKS, render
from nbrun import error_outputs, execute_notebook, printed_prediction, stream_texts

NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
EXPORTED_INPUTS = {  # what each notebook sends in its `%ms_predict` cell: its export is asked the same
    "quickstart.ipynb": lambda np: {"x": [0.5, -1.0, 2.0, 0.1]},
    "text_classifier.ipynb": lambda np: {"text": "what a great fun movie"},
    "bytes_batching.ipynb": lambda np: np.arange(8, dtype=np.float32).tobytes(),  # its `sample_bytes`
}


def test_the_example_notebooks_are_generated_and_committed_without_outputs():
    for path in (NOTEBOOKS / name for name in ALL):
        assert path.read_text() == render(path.name), f"{path.name} is stale: run tests/kernel/make_notebooks.py"
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert not any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")
        sources = "\n".join(cell.source for cell in nb.cells)
        assert "%%ms_handler" in sources and "%ms_predict" in sources and sources.rstrip().endswith("%ms_stop")


@pytest.mark.kernel
@pytest.mark.server
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.stem for p in NOTEBOOK_PATHS])
def test_notebook_runs_in_a_real_kernel_and_prints_a_torchserve_prediction(path: Path, tmp_path: Path):
    nb = execute_notebook(path, tmp_path)
    assert error_outputs(nb) == []
    if path.name not in ALL:  # another surface's notebook (e.g. the widget demo): it runs cleanly
        return
    prediction = printed_prediction(nb)
    assert isinstance(prediction, dict) and prediction, prediction
    texts = "\n".join(stream_texts(nb))
    assert "Traceback" not in texts
    if path.name == "bytes_batching.ipynb":
        assert "error 400" in texts  # the bad request's own answer, printed beside the good ones
    if path.name == "quickstart.ipynb":
        assert (tmp_path / "model_store" / "quickstart.mar").is_file()
        assert (tmp_path / "quickstart_mlp.pt").is_file()  # saved beside the notebook: `msnb export` finds it
    if path.name in EXPORTED_INPUTS:
        assert exported_answer(tmp_path / path.name, EXPORTED_INPUTS[path.name]) == prediction


def exported_answer(notebook: Path, data) -> object:
    """`msnb export` of the notebook file (not the executed copy) from the folder it ran in (its checkpoint lies
    there), served on a fresh TorchServe and asked ``data(numpy)``."""
    import numpy as np

    from msnb.cli.main import main
    from msnb.engines.torchserve import LocalServer

    export = notebook.parent / "export"
    assert main(["export", str(notebook), "-o", str(export)]) == 0
    (mar,) = sorted(export.glob("*.mar"))
    with LocalServer(notebook.parent / "export-server") as server:
        status = server.register(mar)
        return server.predict(status.name, data(np))


@pytest.mark.kernel
@pytest.mark.server
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["shutdown", "kill"])
def test_the_kernels_server_stops_with_the_kernel(how: str, tmp_path: Path):
    """No `%ms_stop`: a kernel shut down (or killed, as a forced restart does) leaves no TorchServe and no
    model store behind (a killed kernel's logs stay in its temporary workdir)."""
    source = (NOTEBOOKS / "quickstart.ipynb").read_text()
    nb = nbformat.reads(source, as_version=4)
    nb.cells = [c for c in nb.cells if "%ms_stop" not in c.source and "%ms_build" not in c.source]
    nb.cells.append(nbformat.v4.new_code_cell("print('server pid:', server.pid)"))
    (tmp_path / "served.ipynb").write_text(nbformat.writes(nb))
    kernel_tmp = Path(tempfile.mkdtemp(prefix="msnb-nb-"))  # short: worker sockets live under it
    nb = execute_notebook(
        tmp_path / "served.ipynb",
        tmp_path / "run",
        shutdown="immediate" if how == "kill" else "graceful",
        tmpdir=kernel_tmp,
    )
    pid = int(
        next(
            line.split()[-1]
            for text in stream_texts(nb)
            for line in text.splitlines()
            if line.startswith("server pid:")
        )
    )
    # Java exits a few seconds after SIGTERM (FACTS.md): poll, bounded
    assert poll(lambda: not _alive(pid), 60, interval=0.5)
    assert not _alive(pid), f"TorchServe (pid {pid}) outlived its kernel ({how})"
    workdirs = list(kernel_tmp.glob("msnb-server-*"))
    # A kernel shut down runs its atexit stop, which removes the whole workdir (as %ms_stop does) unless the kernel
    # is killed first; a killed kernel's watchdog deletes the model store and keeps the logs.
    assert poll(lambda: not any((w / "model_store").exists() for w in workdirs), 30, interval=0.2)
    if how == "kill":
        assert workdirs, "the kernel's server had a temporary workdir"
        assert all((w / "logs").is_dir() for w in workdirs)
    shutil.rmtree(kernel_tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
