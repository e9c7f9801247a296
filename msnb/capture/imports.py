"""Which modules a piece of source imports, read from its AST (module level and function bodies), never run."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

_DYNAMIC = {("importlib", "import_module"), ("", "__import__"), ("", "import_module")}
# Statements whose body may not run (or whose failure is handled) when the module loads.
_BRANCHES = (ast.If, ast.Try, ast.TryStar, ast.For, ast.While, ast.With, ast.FunctionDef, ast.AsyncFunctionDef)
CONDITIONAL = " (inside a branch or a function: it runs only when reached)"


@dataclass(frozen=True)
class Imported:
    """One imported module: its absolute dotted name, the line, and whether the name was computed at run time."""

    module: str
    line: int
    dynamic: bool = False
    conditional: bool = False  # inside an if / try / loop / with / function: loading may never run it

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def imports_of(source: str, package: str | None = None) -> list[Imported]:
    """Every import in ``source``, wherever it sits (module level, functions, classes, ``try`` blocks).

    ``package`` is the dotted package of the module the source belongs to (``mypkg.sub`` for
    ``mypkg/sub/mod.py``): relative imports resolve against it. ``from pkg import name`` lists both
    ``pkg`` and ``pkg.name`` (the name may be a submodule; a resolver drops it when it is not).
    ``importlib.import_module(x)`` / ``__import__(x)`` with a literal string is an import; with a
    computed name it is listed as ``dynamic`` (it cannot be resolved statically).
    """
    tree = ast.parse(source)
    found: list[Imported] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Imported(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base is None:
                continue
            found.append(Imported(base, node.lineno))
            found += [Imported(f"{base}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
                found.append(Imported(arg.value, node.lineno))
            else:
                found.append(Imported(ast.unparse(arg) if arg is not None else "?", node.lineno, dynamic=True))
    certain = _unconditional_lines(tree)
    return [i if i.line in certain else dataclasses.replace(i, conditional=True) for i in found]


def _unconditional_lines(tree: ast.Module) -> set[int]:
    """Lines of statements that run whenever the module loads (not nested in a branch, loop, try or function)."""
    nested = {
        n.lineno
        for b in ast.walk(tree)
        if isinstance(b, _BRANCHES)
        for n in ast.walk(b)
        if n is not b and hasattr(n, "lineno")
    }
    return {n.lineno for n in ast.walk(tree) if hasattr(n, "lineno")} - nested


def _absolute(node: ast.ImportFrom, package: str | None) -> str | None:
    """The absolute module a ``from ... import`` names (None: a relative import outside any package)."""
    if not node.level:
        return node.module
    if not package:
        return None
    parts = package.split(".")
    if node.level - 1 >= len(parts):
        return None
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return ("", func.id) in _DYNAMIC
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return (func.value.id, func.attr) in _DYNAMIC
    return False
