"""`msnb export --execute`: run the notebook's needed cells in a fresh kernel and take the handlers it captured.

The cells run in notebook order are those the handler cells need (``msnb.capture.needed_cells``: the cells binding
the runtime values, names and files they use; never one that serves, predicts or stops), or every cell with
``--execute all``. The ``%%ms_handler`` cells capture in that kernel as they do in Jupyter (runtime values
snapshotted, live checkpoints saved), then one more cell hands the kernel's specs to this process through a private
temp folder; the archives are built here, by the same code as a plain export.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from msnb.errors import MsnbError

if TYPE_CHECKING:  # nbformat and nbclient load when a notebook runs: `msnb --help` stays light
    from nbclient import NotebookClient

    from msnb.spec import HandlerSpec

DEFAULT_TIMEOUT_S = 600  # per cell, as nbclient counts it
NEEDED, ALL = "needed", "all"  # `--execute` (the cells the handler cells need) and `--execute all`
HANDOFF_PREFIX = "msnb-execute-"  # the temp folder the kernel hands its specs and live checkpoints over in
SPECS_FILE = "specs.pkl"
_SETUP = "get_ipython().run_line_magic('load_ext', 'msnb')"


class ExecuteError(MsnbError):
    """The notebook failed while it ran in a fresh kernel: nothing was exported."""


@contextmanager
def executed_specs(
    notebook: str | Path, timeout: int = DEFAULT_TIMEOUT_S, cells: str = NEEDED, names: Iterable[str] | None = None
) -> Iterator[tuple[list[HandlerSpec], str]]:
    """Run ``notebook``'s cells (``cells``: those the handler cells of ``names`` need, or all) in a fresh kernel (its
    folder as the cwd); yields the specs its handler cells captured and which cells ran, in words.

    Live checkpoints are saved in a temp folder that lasts as long as the ``with`` block.
    """
    import nbformat
    from nbclient import NotebookClient

    from msnb.capture.needed_cells import needed_cells
    from msnb.capture.notebook import read_notebook

    path = Path(notebook).resolve()
    nb = read_notebook(path)
    ran = f"ran every cell of {path.name}"
    if cells != ALL:
        selection = needed_cells(nb, path.name, names)
        _stub_out(nb, selection.run)
        ran = selection.summary(path.name)
    client = NotebookClient(
        nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(path.parent)}}
    )
    handoff = Path(tempfile.mkdtemp(prefix=HANDOFF_PREFIX))
    # nbclient stores outputs by cell index: msnb's two cells (load the extension, hand the specs over) go
    # into the notebook object; the first runs outside the history so In[N] counts the notebook's cells.
    nb.cells = [nbformat.v4.new_code_cell(_SETUP), *nb.cells, nbformat.v4.new_code_cell(_handoff_code(handoff))]
    try:
        with client.setup_kernel():
            _run(client, 0, path, "setup", store_history=False)
            for index in range(1, len(nb.cells) - 1):
                _run(client, index, path, f"cell {index}")
            _run(client, len(nb.cells) - 1, path, "hand-off")
        with (handoff / SPECS_FILE).open("rb") as f:
            specs = pickle.load(f)  # written just now by msnb's own code in the kernel (a private folder)
        yield specs, ran
    finally:
        shutil.rmtree(handoff, ignore_errors=True)


def _stub_out(nb, run: Iterable[int]) -> None:
    """Each code cell not in ``run`` becomes a comment: it runs nothing, and In[N] still counts the notebook's cells
    (the kernel's origins read as in a full run)."""
    keep = set(run)
    for number, cell in enumerate(nb.cells, start=1):
        if cell.get("cell_type") == "code" and number not in keep:
            cell.source = f"# msnb export --execute: cell {number} is not run (`--execute all` runs it)"


def _run(client: NotebookClient, index: int, path: Path, label: str, store_history: bool = True) -> None:
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    try:
        client.execute_cell(client.nb.cells[index], index, store_history=store_history)
    except CellTimeoutError:
        raise ExecuteError(
            f"{path.name}, {label} ran longer than {client.timeout} s in the fresh kernel: nothing was exported.",
            "raise the limit with --timeout SECONDS, or make the cell faster.",
        ) from None
    except DeadKernelError as err:
        raise ExecuteError(
            f"The kernel died while running {path.name}, {label} ({err}): nothing was exported.",
            "run the notebook top to bottom in Jupyter to find what kills it (memory is a common cause).",
        ) from None
    except CellExecutionError as err:
        hint = [ln[len("Hint: ") :] for ln in str(err.evalue).splitlines() if ln.startswith("Hint: ")]
        raise ExecuteError(  # an msnb error's own hint (a %%ms_handler that refused a secret) says what to do
            f"{path.name}, {label} failed in the fresh kernel: {err.ename}: {_first_line(err.evalue)}. "
            "Nothing was exported.",
            hint[0]
            if hint
            else "fix that cell so the notebook runs top to bottom (Restart & Run All in Jupyter "
            "shows the same error).",
        ) from None


def _first_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def _handoff_code(folder: Path) -> str:
    return f"import msnb.cli.execute as _msnb_execute\n_msnb_execute.hand_off({str(folder)!r})\ndel _msnb_execute\n"


def hand_off(folder: str) -> None:
    """In the kernel: write the session's specs for the exporting process (live checkpoints saved as files)."""
    from msnb.session.core import current

    folder_path = Path(folder)
    specs = [_portable(spec, folder_path) for spec in current().specs.values()]
    with (folder_path / SPECS_FILE).open("wb") as f:
        pickle.dump(specs, f)


def saved_by_msnb(spec: HandlerSpec) -> Path | None:
    """The hand-off folder when ``spec``'s checkpoint is a live one msnb saved there (``_portable``), else None."""
    ckpt = Path(spec.checkpoint) if isinstance(spec.checkpoint, (str, Path)) else None
    if ckpt is None or ckpt.name != f"{spec.name}.checkpoint.pt" or not ckpt.parent.name.startswith(HANDOFF_PREFIX):
        return None
    return ckpt.parent if ckpt.parent.parent.resolve() == Path(tempfile.gettempdir()).resolve() else None


def _portable(spec: HandlerSpec, folder: Path) -> HandlerSpec:
    """The spec with a live checkpoint (an nn.Module or state_dict in the kernel) written to a file in ``folder``."""
    import torch

    ckpt = spec.checkpoint
    if ckpt is None or isinstance(ckpt, (str, Path)):
        return spec
    target = folder / f"{spec.name}.checkpoint.pt"
    if isinstance(ckpt, torch.jit.ScriptModule):
        torch.jit.save(ckpt, str(target))
    else:
        torch.save(ckpt.state_dict() if isinstance(ckpt, torch.nn.Module) else ckpt, target)
    return spec.replace(checkpoint=str(target))


def select(specs: Iterable[HandlerSpec], names: Iterable[str] | None, notebook: str | Path) -> list[HandlerSpec]:
    """The specs asked for by name (all when ``names`` is None); an unknown name is a usage error."""
    from msnb.capture.notebook import NoHandlerError, NotebookError

    specs = list(specs)
    if not specs:
        raise NoHandlerError(
            f"Running {Path(notebook).name} captured no handler.",
            "start a code cell with `%%ms_handler NAME` over its init_function or your own handler.",
        )
    if names is None:
        return specs
    known = {s.name: s for s in specs}
    missing = [n for n in names if n not in known]
    if missing:
        raise NotebookError(
            f"No handler named {', '.join(map(repr, missing))} in {Path(notebook).name}.",
            f"the notebook defines: {', '.join(known)}.",
        )
    return [known[n] for n in names]
