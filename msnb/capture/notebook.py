"""Read a notebook file, never executing it, and capture each `%%ms_handler` cell as a HandlerSpec.

Cells are named by their 1-based position in the file, markdown cells included
(``"quickstart.ipynb, cell 3"``), so an error points at the cell a person sees.

Which definitions a handler cell gets (the dependency pool): the code cells ABOVE it, in file
order, so the latest definition above the handler cell wins, exactly as "Run All" leaves the
kernel when the handler cell runs. A definition BELOW the handler cell never counts, even if
the author's kernel had it from running cells out of order: the export must be what a fresh
Run All builds. When a missing name is defined below, the error says where and to move it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from IPython.core.error import UsageError

from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.capture.magic_lines import cell_magic_first
from msnb.errors import CaptureError, MsnbError, OptionError, SpecError
from msnb.options import handler_config, parse_handler_line
from msnb.spec import HandlerSpec, Origin

MAGIC = "%%ms_handler"
_JSON_WORDS = {"true", "false", "null"}


class NotebookError(MsnbError):
    """The notebook file cannot be read, or the handlers asked for are not in it (a usage error)."""


class NoHandlerError(MsnbError):
    """The notebook holds no `%%ms_handler` cell."""


@dataclass(frozen=True)
class HandlerCell:
    """One `%%ms_handler` cell: its number, the option line and the body below it."""

    number: int
    origin: Origin
    line: str
    body: str

    @property
    def name(self) -> str:
        try:
            return parse_handler_line(self.line).name
        except (UsageError, OptionError):
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
    text = _notebook_json(path)
    try:
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    except Exception as err:
        raise NotebookError(
            f"{path} is not a readable notebook ({type(err).__name__}: {str(err)[:200]}).",
            "give an .ipynb file saved by Jupyter (nbformat 3 or 4).",
        ) from None
    nb = _as_v4(nb, path)
    if not isinstance(nb.get("cells"), list):
        raise NotebookError(
            f"{path} has no cell list: it is not a Jupyter notebook.", "give an .ipynb file saved by Jupyter."
        )
    return nb


def _notebook_json(path: Path) -> str:
    """The file's text, once it is known to be JSON with a notebook's version and cells."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text)
    except ValueError as err:  # UnicodeDecodeError too
        raise NotebookError(
            f"{path} is not valid notebook JSON ({err}).",
            "the file is corrupt or not an .ipynb; re-save it from Jupyter.",
        ) from None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("nbformat"), int)
        or not ({"cells", "worksheets"} & set(raw))
    ):
        raise NotebookError(
            f"{path} is JSON but not a Jupyter notebook (no nbformat version and cells).",
            "give an .ipynb file saved by Jupyter (nbformat 3 or 4).",
        )
    return text


def _as_v4(nb: nbformat.NotebookNode, path: Path) -> nbformat.NotebookNode:
    major = nb.get("nbformat")
    if major == 4:
        return nb
    try:
        return nbformat.convert(nb, 4)
    except Exception as err:
        raise NotebookError(
            f"{path} is nbformat {major} and could not be converted to 4 ({err}).",
            "open and re-save it in a current Jupyter (File > Save) to upgrade it.",
        ) from None


def handler_cells(nb: nbformat.NotebookNode, label: str) -> list[HandlerCell]:
    """Every code cell whose first line starts with `%%ms_handler`, in file order."""
    found = []
    for number, cell in enumerate(nb.cells, start=1):
        source = "".join(cell_magic_first(cell.get("source", "").splitlines(True)))  # comments above it
        if cell.get("cell_type") != "code" or not source.lstrip().startswith(MAGIC):
            continue
        first, _, body = source.lstrip().partition("\n")
        found.append(HandlerCell(number, cell_origin(label, number), first[len(MAGIC) :].strip(), body))
    return found


def cell_origin(label: str, number: int) -> Origin:
    """A notebook cell as an origin: ``quickstart.ipynb, cell 3`` (1-based, markdown cells counted)."""
    return Origin(f"{label}, cell {number}", notebook=label, cell=number)


def dependency_pool(nb: nbformat.NotebookNode, label: str, number: int, below: bool = False) -> list:
    """The (origin, source) code cells above handler cell ``number`` in file order (and below it with ``below``)."""
    pool = []
    for index, cell in enumerate(nb.cells, start=1):
        if index == number or cell.get("cell_type") != "code" or (index > number and not below):
            continue  # capture itself rewrites IPython syntax and skips cell-magic cells
        pool.append((cell_origin(label, index), cell.get("source", "")))
    return pool


def capture_cell(
    nb: nbformat.NotebookNode, path: Path, cell: HandlerCell, overrides: dict[str, Any] | None = None
) -> HandlerSpec:
    """Parse the cell's option line with the magic's own parser and capture it (paths relative to the notebook)."""
    overrides = dict(overrides or {})
    notes: list[str] = []
    try:
        args = parse_handler_line(cell.line)
        if "checkpoint" in overrides:
            args.checkpoint = None
        if args.example is not None and args.example.strip().isidentifier() and args.example.strip() not in _JSON_WORDS:
            notes.append(
                f"--example {args.example.strip()} names a kernel variable, which export cannot read: "
                "the archive has no example (--check only loads the handler)."
            )
            args.example = None
        config = handler_config(args, namespace=None, base_dir=path.resolve().parent)
    except (UsageError, OptionError) as err:
        raise SpecError(
            f"{cell.origin}: bad %%ms_handler line {cell.line!r}: {err}",
            "fix the option line; `%%ms_handler?` in a notebook lists the options.",
        ) from None
    except SpecError as err:
        raise SpecError(f"{cell.origin}: {err.message}", _variable_hint(args, err)) from None
    config.update(overrides)
    config["warnings"] = tuple(notes)
    try:
        return capture(
            args.name,
            cell.body,
            dependency_pool(nb, path.name, cell.number),
            cell_origin=cell.origin,
            search_path=search_path(path.resolve().parent),
            body_line=2,
            **config,
        )
    except CaptureError as err:
        raise _below_hint(err, nb, path, cell, args.name, config) from None


def _below_hint(err: CaptureError, nb, path: Path, cell: HandlerCell, name: str, config: dict) -> CaptureError:
    """When the missing definitions exist below the handler cell, say so: export reads cells as Run All runs them."""
    try:
        pool = dependency_pool(nb, path.name, cell.number, below=True)
        spec = capture(name, cell.body, pool, cell_origin=cell.origin, body_line=2, **config)
    except MsnbError:
        return err
    late = [b for b in spec.pulled_in if (b.origin.cell or 0) > cell.number]
    if not late:
        return err
    where = "; ".join(f"{', '.join(b.names) or 'code'} in {b.origin}" for b in late)
    return CaptureError(
        f"{err.message} It is defined below the handler cell ({where}).",
        "move that cell above the handler cell: export reads the notebook top to bottom, as Run All runs it.",
    )


def load_handlers(
    path: str | Path, names: Iterable[str] | None = None, overrides: dict[str, Any] | None = None
) -> list[Captured]:
    """Capture the notebook's handlers (all, or those ``names``), each to a spec or its own error.

    Raises MsnbError when the notebook cannot be read, has no handler cell, or a name is unknown.
    """
    path = Path(path)
    nb = read_notebook(path)
    cells = handler_cells(nb, path.name)
    if not cells:
        raise NoHandlerError(
            f"{path} has no %%ms_handler cell.",
            "start a code cell with `%%ms_handler NAME` over its init_function or your own handler (see the README).",
        )
    by_name: dict[str, list[HandlerCell]] = {}
    for c in cells:
        by_name.setdefault(c.name, []).append(c)
    latest = sorted((group[-1] for group in by_name.values()), key=lambda c: c.number)  # as Run All leaves them
    return [_captured(nb, path, cell, overrides, by_name[cell.name][:-1]) for cell in _chosen(latest, names, path)]


def _chosen(cells: list[HandlerCell], names: Iterable[str] | None, path: Path) -> list[HandlerCell]:
    """The cells of the handlers asked for (all when ``names`` is None); an unknown name is an error."""
    wanted = list(names) if names is not None else []
    if not wanted:
        return cells
    known = [c.name for c in cells]
    missing = [n for n in wanted if n not in known]
    if missing:
        raise NotebookError(
            f"No handler named {', '.join(map(repr, missing))} in {path.name}.",
            f"the notebook defines: {', '.join(known)}.",
        )
    return [c for c in cells if c.name in set(wanted)]


def _captured(nb, path: Path, cell: HandlerCell, overrides, earlier: list[HandlerCell]) -> Captured:
    """One handler cell captured to a spec (warning of the ``earlier`` cells it replaces) or its own error."""
    try:
        spec = capture_cell(nb, path, cell, overrides)
    except MsnbError as err:
        return Captured(cell, error=err)
    replaced = [str(c.origin) for c in earlier]
    if replaced:
        note = f"{', '.join(replaced)} also define(s) {cell.name!r}; this later cell wins, as in Run All."
        spec = spec.replace(warnings=spec.warnings + (note,))
    return Captured(cell, spec=spec)


def _variable_hint(args: Any, err: SpecError) -> str | None:
    value = getattr(args, "checkpoint", None) or ""
    if value.isidentifier() and err.message.startswith("--checkpoint"):
        return (
            f"export reads the notebook file, not the kernel: the variable {value!r} does not exist there. "
            "Save the weights to a file (torch.save(model.state_dict(), 'model.pt')) and give its path."
        )
    return err.hint
