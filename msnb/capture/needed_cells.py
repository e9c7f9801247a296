"""Which cells of a notebook `msnb export --execute` runs: its handler cells and, transitively, the cells they need.

A cell is needed when it binds a name a needed cell reads (the latest binding above the reader, as Run All leaves
the kernel), when it writes a file a handler names (its ``--checkpoint``, ``--extra-files``, ``@example``, a local
module it imports: the file's name appears in the cell, ``%%writefile`` included), or when it reads or changes a
computed value a needed cell binds before the handler cell runs (training a model, filling a vocabulary). Every
needed cell's own reads are needed in turn. A cell that serves, predicts or stops (an ``%ms_`` line magic,
``msnb.serve(...)``, or ``predict``, ``explain`` or ``stop`` called on what one of those returned) never runs. This
reads the file with ``ast``; nothing runs.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from msnb.capture.cells import transform
from msnb.capture.mutations import mutated
from msnb.capture.notebook import HandlerCell, handler_cells
from msnb.capture.scope import BUILTINS, Stmt
from msnb.options import parse_handler_line

SERVING_CALLS = frozenset({"serve", "predict", "predict_stream", "explain", "stop"})  # on a server msnb gave
_LATER = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)  # bodies that run only when called
# The handler options whose value may name a kernel variable or a file a cell writes.
NAMING_OPTIONS = ("checkpoint", "init_kwargs", "requirements", "extra_files", "include_file", "example", "schema")
NAMING_OPTIONS += ("config_file", "model_file")
_VALUES = ("runtime", "const")  # statements binding a value a later cell may still change (not def, class, import)


@dataclass(frozen=True)
class Selection:
    """The code cells to run (numbers as ``msnb export`` names cells: 1-based, markdown counted), in order."""

    run: tuple[int, ...]
    serving: tuple[int, ...]  # cells that serve, predict or stop: never run
    unneeded: tuple[int, ...]  # code cells no handler cell needs

    def summary(self, notebook: str) -> str:
        """One line: which cells ran, which did not and why."""
        total = len(self.run) + len(self.serving) + len(self.unneeded)
        said = (
            f"ran {len(self.run)} of {total} code cells of {notebook}: {_cells(self.run)} (what its handler cells use)"
        )
        if self.serving:
            said += f"; not run: {_cells(self.serving)} (they serve, predict or stop)"
        if self.unneeded:
            said += f"; {'' if self.serving else 'not run: '}{_cells(self.unneeded)} (not needed)"
        return said + "; `--execute all` runs every cell"


def needed_cells(nb, label: str, names: Iterable[str] | None = None) -> Selection:
    """The cells of notebook ``nb`` (named ``label``) that the handler cells of ``names`` (default: all) need."""
    cells = _Cells(nb, label)
    wanted = set(names) if names is not None else None
    latest = {c.name: c for c in handler_cells(nb, label)}  # the later cell of a name wins, as in Run All
    chosen = [c for name, c in latest.items() if wanted is None or name in wanted]
    last = max((c.number for c in chosen), default=0)
    need = _Needs(cells, last)
    for cell in chosen:
        need.cell(cell.number)
        need.options(cell)
    need.resolve()
    run = tuple(sorted(need.chosen))
    serving = tuple(n for n in cells.code if cells.serving(n))
    unneeded = tuple(n for n in cells.code if n not in need.chosen and n not in serving)
    return Selection(run, serving, unneeded)


class _Cells:
    """The notebook's code cells parsed once: each one's statements, its text, and which bind each name."""

    def __init__(self, nb, label: str):
        self.code: list[int] = []
        self.text: dict[int, str] = {}
        self.stmts: dict[int, list[Stmt]] = {}
        self.bindings: dict[str, list[Stmt]] = {}
        handlers = {c.number: c for c in handler_cells(nb, label)}
        for number, cell in enumerate(nb.cells, start=1):
            if cell.get("cell_type") != "code" or not cell.get("source", "").strip():
                continue
            self.code.append(number)
            self.text[number] = cell.get("source", "")
            body = handlers[number].body if number in handlers else self.text[number]
            self.stmts[number] = _statements(number, body)
            for stmt in self.stmts[number]:
                for name in stmt.defines:
                    self.bindings.setdefault(name, []).append(stmt)
        servers = {n for stmts in self.stmts.values() for s in stmts if _serves(s.node, set()) for n in s.defines}
        self.serves = {
            n for n in self.code if n not in handlers and any(_serves(s.node, servers) for s in self.stmts[n])
        }

    def binding(self, name: str, before: tuple[int, int]) -> Stmt | None:
        found = [s for s in self.bindings.get(name, ()) if s.pos < before]
        return found[-1] if found else None

    def serving(self, number: int) -> bool:
        """Whether the cell serves, predicts or stops when it runs."""
        return number in self.serves


class _Needs:
    """The cells chosen so far, and the names and files still to trace to the cells that provide them."""

    def __init__(self, cells: _Cells, last: int):
        self.cells, self.last = cells, last
        self.chosen: set[int] = set()
        self.names: list[tuple[str, tuple[int, int]]] = []  # (name, the reader's position)
        self.files: list[tuple[str, int]] = []  # (a file's name, the cell that must come after its writer)

    def cell(self, number: int) -> None:
        """Choose a cell: what its statements read, import and compute is needed in turn."""
        if number in self.chosen or self.cells.serving(number):
            return
        self.chosen.add(number)
        for stmt in self.cells.stmts[number]:
            self.names += [(n, stmt.pos) for n in sorted(stmt.usage.uses) if n not in BUILTINS]
            self.files += [(f, number) for f in _local_modules(stmt.node)]
            if stmt.kind in _VALUES:
                self._later_changes(stmt)

    def options(self, cell: HandlerCell) -> None:
        """The variables and files the handler cell's option line names."""
        args = parse_handler_line(cell.line)
        for dest in NAMING_OPTIONS:
            value = getattr(args, dest, None)
            for word in value if isinstance(value, (list, tuple)) else [value]:
                word = str(word or "").strip().removeprefix("@")
                if word.isidentifier():
                    self.names.append((word, (cell.number, 0)))
                elif word and not word.startswith(("{", "[", '"')):
                    self.files.append((word.rstrip("/").rsplit("/", 1)[-1], cell.number))

    def resolve(self) -> None:
        while self.names or self.files:
            if self.names:
                name, before = self.names.pop(0)
                stmt = self.cells.binding(name, before)
                if stmt is not None:
                    self.cell(stmt.pos[0])
            else:
                file, before = self.files.pop(0)
                for number in self.cells.code:
                    if number < before and file in self.cells.text[number]:
                        self.cell(number)

    def _later_changes(self, stmt: Stmt) -> None:
        """The statements after ``stmt`` and before the last handler cell that read or change what it binds."""
        bound = stmt.defines
        for number in self.cells.code:
            if number > self.last:
                break
            for later in self.cells.stmts[number]:
                changed = later.usage.uses | set(mutated(later.node))
                if later.pos > stmt.pos and later.kind != "def" and bound & changed:
                    self.cell(number)


def _statements(number: int, source: str) -> list[Stmt]:
    text = transform(source)
    if text is None:  # a cell magic's body (%%writefile): no Python of its own
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [Stmt(f"cell {number}", (number, j), node, text) for j, node in enumerate(tree.body)]


def _serves(stmt: ast.stmt, servers: set[str]) -> bool:
    """Whether ``stmt``, when it runs, calls an msnb line magic or ``msnb.serve``, or a serving call on ``servers``."""
    return any(_serving_call(node, servers) for node in _running(stmt))


def _serving_call(node: ast.AST, servers: set[str]) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    func, receiver = node.func, node.func.value
    if func.attr == "run_line_magic" and node.args and isinstance(node.args[0], ast.Constant):
        return str(node.args[0].value).startswith("ms_")
    named = receiver.id if isinstance(receiver, ast.Name) else None
    return func.attr in SERVING_CALLS and (named in servers or (named == "msnb" and func.attr == "serve"))


def _running(node: ast.AST):
    """``node`` and what runs with it, not the bodies of the functions, classes and lambdas it defines."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _LATER):
            yield from _running(child)


def _local_modules(node: ast.stmt) -> list[str]:
    """The files an import would read from the notebook's folder (``model.py`` for ``from model import Net``)."""
    if isinstance(node, ast.Import):
        tops = [a.name.split(".")[0] for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        tops = [node.module.split(".")[0]]
    else:
        return []
    return [f"{top}.py" for top in tops if top not in sys.stdlib_module_names and top not in sys.builtin_module_names]


def _cells(numbers: Iterable[int]) -> str:
    return ", ".join(map(str, numbers)) or "none"
