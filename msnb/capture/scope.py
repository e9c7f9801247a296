"""Which module-level names one top-level statement binds and which it reads (free-name analysis)."""

from __future__ import annotations

import ast
import builtins
import functools
import re
import symtable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from msnb.spec import Origin

# Names an IPython kernel provides that a TorchServe worker does not, with what to do instead.
IPYTHON_NAMES = {
    "get_ipython": "the handler runs inside TorchServe, not IPython; drop the call (magics and `!` lines too).",
    "display": "`display` exists only in IPython; return values from postprocess instead of displaying them.",
    "In": "`In` is IPython's input history; it does not exist in TorchServe.",
    "Out": "`Out` is IPython's output history; it does not exist in TorchServe.",
    "_": "`_` is IPython's last output; assign the value to a name or a literal instead.",
    "__": "`__` is IPython's output history; it does not exist in TorchServe.",
    "___": "`___` is IPython's output history; it does not exist in TorchServe.",
}
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_IMPORTS = (ast.Import, ast.ImportFrom)
_MODULE_DUNDERS = {
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__loader__",
    "__package__",
    "__builtins__",
    "__annotations__",
    "__cached__",
}
# IPython injects get_ipython/display into `builtins` while a kernel runs: they are not real builtins.
BUILTINS = frozenset(set(dir(builtins)) - set(IPYTHON_NAMES) - {"__IPYTHON__", "dreload"}) | _MODULE_DUNDERS


@dataclass(frozen=True)
class Usage:
    """What one top-level statement does to the module namespace."""

    binds: frozenset[str]  # bound at module level by the statement itself
    global_binds: frozenset[str]  # assigned inside a function under `global NAME`
    uses: frozenset[str]  # module-level names read anywhere inside it, minus those it binds
    eager: frozenset[str] = frozenset()  # the subset read while the statement runs (bases, decorators, defaults)


_COMPREHENSIONS = ("listcomp", "setcomp", "dictcomp", "genexpr")


def usage(source: str) -> Usage:
    """Analyse one statement's source (``segment`` of a top-level node) with Python's own scoping rules.

    Annotations count as uses (they are evaluated at definition time), attribute access
    ``np.x`` uses ``np``, comprehension and parameter names are local.
    """
    top = symtable.symtable(source, "<cell>", "exec")
    binds = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    eager = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    global_binds, uses = set(), set(eager)
    stack = [(child, True) for child in top.get_children()]
    while stack:
        table, parent_eager = stack.pop()
        runs_now = parent_eager and (table.get_type() == "class" or table.get_name() in _COMPREHENSIONS)
        stack.extend((child, runs_now) for child in table.get_children())
        for sym in (s for s in table.get_symbols() if s.is_global()):
            if sym.is_referenced():
                uses.add(sym.get_name())
                if runs_now:
                    eager.add(sym.get_name())
            if sym.is_declared_global() and sym.is_assigned():
                global_binds.add(sym.get_name())
    own = binds | global_binds
    return Usage(frozenset(binds), frozenset(global_binds), frozenset(uses - own), frozenset(eager - own))


def segment(source: str, node: ast.stmt) -> str:
    """The statement's source verbatim, decorators included.

    Slices lines split once per source (``ast.get_source_segment`` re-splits the whole source on every
    call: a 5 MB literal took minutes on Python 3.11).
    """
    lines = source_lines(source)
    decorators = getattr(node, "decorator_list", None)
    first = min(d.lineno for d in decorators) - 1 if decorators else node.lineno - 1
    col = 0 if decorators else node.col_offset
    last, end_col = node.end_lineno - 1, node.end_col_offset
    if first == last:
        return lines[first].encode()[col:end_col].decode()
    head = lines[first].encode()[col:].decode()
    return head + "".join(lines[first + 1 : last]) + lines[last].encode()[:end_col].decode()


@functools.lru_cache(maxsize=8)
def source_lines(source: str) -> tuple[str, ...]:
    """``source`` split after each line ending as the parser counts them (\\n, \\r\\n, \\r; not form feeds)."""
    return tuple(_LINE.findall(source))


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def is_literal_assignment(node: ast.stmt) -> bool:
    """``NAME = <literal>`` (also ``A = B = ...``, ``A, B = 1, 2`` and ``NAME: T = <literal>``)."""
    if isinstance(node, ast.AnnAssign):
        targets, value = [node.target], node.value
    elif isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    else:
        return False
    if value is None or not all(_names_only(t) for t in targets):
        return False
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _names_only(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(t) for t in target.elts)
    return isinstance(target, ast.Name)


def first_use(node: ast.AST, name: str) -> int:
    """The line where ``name`` first appears inside ``node`` (the node's own line if nowhere)."""
    lines = [n.lineno for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]
    return min(lines, default=getattr(node, "lineno", 1))


def import_bindings(node: ast.Import | ast.ImportFrom) -> dict[str, ast.alias]:
    """Name bound -> the alias that binds it (``import a.b`` binds ``a``); star imports bind nothing."""
    bound = {}
    for alias in node.names:
        if alias.name != "*":
            bound[alias.asname or alias.name.split(".")[0]] = alias
    return bound


def import_only(node: ast.Import | ast.ImportFrom, names: set[str]) -> str:
    """The import statement reduced to the aliases that bind ``names``."""
    keep = [a for a in node.names if (a.asname or a.name.split(".")[0]) in names]
    if isinstance(node, ast.Import):
        return ast.unparse(ast.Import(names=keep))
    return ast.unparse(ast.ImportFrom(module=node.module, names=keep, level=node.level))


@dataclass(eq=False)
class Stmt:
    """One top-level statement of a cell, classified by what capture may do with it."""

    origin: Any  # msnb.spec.Origin (or its label)
    pos: tuple[int, int]  # (cell index, statement index): source order
    node: ast.stmt
    cell_text: str = field(repr=False)

    @cached_property
    def text(self) -> str:
        return segment(self.cell_text, self.node)

    @cached_property
    def kind(self) -> str:
        """def | import | star | const | future | doc (kept or harmless) or runtime (never copied)."""
        node = self.node
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            return "future"
        if isinstance(node, _IMPORTS):
            return "star" if any(a.name == "*" for a in node.names) else "import"
        if isinstance(node, (*FUNCS, ast.ClassDef)):
            return "def"
        if is_literal_assignment(node):
            return "const"
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return "doc"
        return "runtime"

    @cached_property
    def usage(self) -> Usage:
        try:
            return usage(self.text)
        except SyntaxError:  # e.g. top-level `await`: ast accepts it, symtable does not
            stored = {n.id for n in ast.walk(self.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            return Usage(frozenset(stored), frozenset(), frozenset())

    @property
    def defines(self) -> set[str]:
        if isinstance(self.node, _IMPORTS):
            return set(import_bindings(self.node))
        if isinstance(self.node, (*FUNCS, ast.ClassDef)):
            return {self.node.name}
        return set(self.usage.binds)

    def in_order(self, names: set[str]) -> list[str]:
        """``names`` in the order the statement binds them."""
        if isinstance(self.node, _IMPORTS):
            return [n for n in import_bindings(self.node) if n in names]
        stores = [n.id for n in ast.walk(self.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        return sorted(names, key=lambda n: (stores.index(n) if n in stores else -1, n))

    def where(self, name: str) -> str:
        return f"line {first_use(self.node, name)} of {origin_phrase(self.origin)}"

    @property
    def first_line(self) -> int:
        """The cell line where ``text`` starts (its first decorator's, for a decorated definition)."""
        decorators = getattr(self.node, "decorator_list", None)
        return min([d.lineno for d in decorators or ()] + [self.node.lineno])


def origin_phrase(origin: Any) -> str:
    """``handler cell`` reads as "the handler cell" in messages; ``cell 3`` stays as it is (``Origin.phrase``)."""
    return Origin.of(origin).phrase
