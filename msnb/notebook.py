"""Read a notebook file, never executing it, and capture each `%%ms_handler` cell as a HandlerSpec.

Cells are named by their 1-based position in the file, markdown cells included
(``"quickstart.ipynb, cell 3"``), so an error points at the cell a person sees.

Which definitions a handler cell gets (the dependency pool): the code cells ABOVE it, in file
order, so the latest definition above the handler cell wins, exactly as "Run All" would leave
the kernel when the handler cell runs. A name defined only BELOW the handler cell is still
used (the nearest such cell wins) because the author's kernel, run out of order, had it; the
spec then carries a warning saying that "Run All" would not see it there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import nbformat
from IPython.core.error import UsageError

from msnb.errors import MsnbError, SpecError
from msnb.options import handler_config, parse_handler_line
from msnb.spec import HandlerSpec

MAGIC = "%%ms_handler"


class NotebookError(MsnbError):
    """The notebook file cannot be read, or the handlers asked for are not in it (a usage error)."""


class NoHandlerError(MsnbError):
    """The notebook holds no `%%ms_handler` cell."""


@dataclass(frozen=True)
class HandlerCell:
    """One `%%ms_handler` cell: its number, the option line and the body below it."""

    number: int
    origin: str
    line: str
    body: str

    @property
    def name(self) -> str:
        try:
            return parse_handler_line(self.line).name
        except UsageError:
            words = self.line.split()
            return words[0] if words else "?"


@dataclass(frozen=True)
class Captured:
    """The outcome for one handler cell: a spec, or the error that stopped it."""

    cell: HandlerCell
    spec: HandlerSpec | None = None
    error: MsnbError | None = None

    @property
    def name(self) -> str:
        return self.spec.name if self.spec else self.cell.name


def read_notebook(path: str | Path) -> nbformat.NotebookNode:
    """The notebook as nbformat v4 (v3 converted); a file that is not a notebook is a clear error."""
    path = Path(path)
    if not path.is_file():
        raise NotebookError(f"Notebook {str(path.resolve())!r} does not exist.", "give the path of an .ipynb file.")
    try:
        nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise NotebookError(f"{path} is not valid notebook JSON ({err}).",
                        "the file is corrupt or not an .ipynb; re-save it from Jupyter.") from None
    except Exception as err:  # nbformat's NotJSONError / reader errors for non-notebook JSON
        raise NotebookError(f"{path} is not a Jupyter notebook ({type(err).__name__}: {str(err)[:200]}).",
                        "give an .ipynb file saved by Jupyter (nbformat 3 or 4).") from None
    major = nb.get("nbformat")
    if major != 4:
        try:
            nb = nbformat.convert(nb, 4)
        except Exception as err:
            raise NotebookError(f"{path} is nbformat {major} and could not be converted to 4 ({err}).",
                            "open and re-save it in a current Jupyter (File > Save) to upgrade it.") from None
    if not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{path} has no cell list: it is not a Jupyter notebook.", "give an .ipynb file saved by Jupyter.")
    return nb


def handler_cells(nb: nbformat.NotebookNode, label: str) -> list[HandlerCell]:
    """Every code cell whose first line starts with `%%ms_handler`, in file order."""
    found = []
    for number, cell in enumerate(nb.cells, start=1):
        source = cell.get("source", "")
        if cell.get("cell_type") != "code" or not source.lstrip().startswith(MAGIC):
            continue
        first, _, body = source.lstrip().partition("\n")
        found.append(HandlerCell(number, f"{label}, cell {number}", first[len(MAGIC):].strip(), body))
    return found


def dependency_pool(nb: nbformat.NotebookNode, label: str, number: int) -> tuple[list, set[str]]:
    """The (origin, python source) pool for the handler cell ``number`` and the origins below it.

    Below-cells come first, nearest last, and above-cells after them in file order: capture
    takes the latest definition in the pool, so one above always wins over one below.
    """
    above, below = [], []
    for index, cell in enumerate(nb.cells, start=1):
        if index == number or cell.get("cell_type") != "code":
            continue  # capture itself rewrites IPython syntax and skips cell-magic cells
        (above if index < number else below).append((f"{label}, cell {index}", cell.get("source", "")))
    return list(reversed(below)) + above, {origin for origin, _ in below}


def capture_cell(nb: nbformat.NotebookNode, path: Path, cell: HandlerCell,
                 overrides: dict[str, Any] | None = None) -> HandlerSpec:
    """Parse the cell's option line with the magic's own parser and capture it (paths relative to the notebook)."""
    from msnb.capture import capture

    overrides = dict(overrides or {})
    try:
        args = parse_handler_line(cell.line)
        if "checkpoint" in overrides:
            args.checkpoint = None
        config = handler_config(args, namespace=None, base_dir=path.resolve().parent)
    except UsageError as err:
        raise SpecError(f"{cell.origin}: bad %%ms_handler line {cell.line!r}: {err}",
                        "fix the option line; `%%ms_handler?` in a notebook lists the options.") from None
    except SpecError as err:
        raise SpecError(f"{cell.origin}: {err.message}", _variable_hint(args, err.hint)) from None
    config.update(overrides)
    pool, below = dependency_pool(nb, path.name, cell.number)
    spec = capture(args.name, cell.body, pool, cell_origin=cell.origin, **config)
    late = [b for b in spec.pulled_in if b.origin in below]
    if late:
        notes = [f"{', '.join(b.names) or 'code'} comes from {b.origin}, below the handler cell: "
                 "Run All would not have it yet; move that cell above." for b in late]
        spec = spec.replace(warnings=tuple(spec.warnings) + tuple(notes))
    return spec


def load_handlers(path: str | Path, names: Iterable[str] | None = None,
                  overrides: dict[str, Any] | None = None) -> list[Captured]:
    """Capture the notebook's handlers (all, or those ``names``), each to a spec or its own error.

    Raises MsnbError when the notebook cannot be read, has no handler cell, or a name is unknown.
    """
    path = Path(path)
    nb = read_notebook(path)
    cells = handler_cells(nb, path.name)
    if not cells:
        raise NoHandlerError(f"{path} has no %%ms_handler cell.",
                        "start a code cell with `%%ms_handler NAME` over its init_function (see the README).")
    if names:
        known = [c.name for c in cells]
        missing = [n for n in names if n not in known]
        if missing:
            raise NotebookError(f"No handler named {', '.join(map(repr, missing))} in {path.name}.",
                            f"the notebook defines: {', '.join(known)}.")
        cells = [c for c in cells if c.name in set(names)]
    results = []
    for cell in cells:
        try:
            results.append(Captured(cell, spec=capture_cell(nb, path, cell, overrides)))
        except MsnbError as err:
            results.append(Captured(cell, error=err))
    return results


def _variable_hint(args: Any, hint: str | None) -> str | None:
    value = getattr(args, "checkpoint", None) or ""
    if value.isidentifier():
        return (f"export reads the notebook file, not the kernel: the variable {value!r} does not exist there. "
                "Save the weights to a file (torch.save(model.state_dict(), 'model.pt')) and give its path.")
    return hint
