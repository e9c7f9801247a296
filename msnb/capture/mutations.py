"""Which module-level names a statement changes in place (``d[k] = v``, ``x.append(...)``): mutated literals.

A name bound by a literal and changed in place later in any executed cell does not hold its literal
any more, so capture treats it as a runtime value. Only code that runs when the cell runs counts: the
statement's own body, loops and comprehensions included, but not the bodies of functions and classes
it defines (they run later, when called).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# Methods that change a list, dict, set or bytearray in place (the types a literal can build).
MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "popitem",
        "remove",
        "clear",
        "update",
        "setdefault",
        "add",
        "discard",
        "sort",
        "reverse",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
        "__setitem__",
        "__delitem__",
        "__iadd__",
    }
)
_LATER = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True)
class Mutation:
    """``name`` changed in place by a top-level statement at ``pos`` (cell, statement), on ``line`` of ``origin``."""

    name: str
    pos: tuple[int, int]
    line: int
    origin: Any

    def where(self) -> str:
        from msnb.capture.scope import origin_phrase

        return f"line {self.line} of {origin_phrase(self.origin)}"


def mutated(node: ast.stmt) -> dict[str, int]:
    """The module-level names ``node`` changes in place when it runs, each with the first line doing it."""
    found: dict[str, int] = {}
    for sub in _defaults(node) if isinstance(node, _LATER) else _running(node):
        for target in _targets(sub):
            root = _root(target)
            if root is not None and (root is not target or isinstance(sub, ast.AugAssign)):
                found.setdefault(root.id, sub.lineno)
    return found


def mutations(stmts: Iterable[Any]) -> list[Mutation]:
    """Every in-place change made by ``stmts`` (``msnb.capture.scope.Stmt``), in statement order."""
    return [Mutation(n, s.pos, line, s.origin) for s in stmts for n, line in mutated(s.node).items()]


def _running(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what runs with it: not the bodies of functions, classes or lambdas it defines."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _LATER):
            yield from _defaults(child)
            continue
        yield from _running(child)


def _defaults(node: ast.AST) -> Iterator[ast.AST]:
    """What a def / class / lambda evaluates when defined: defaults, decorators, bases."""
    parts = [*getattr(node, "decorator_list", []), *getattr(node, "bases", []), *getattr(node, "keywords", [])]
    args = getattr(node, "args", None)
    if args is not None:
        parts += [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    for part in parts:
        yield from _running(part)


def _targets(node: ast.AST) -> list[ast.expr]:
    """Expressions ``node`` writes into: assignment / del targets and receivers of mutating methods."""
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in _unpacked(target)]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return _unpacked(node.target)
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return _unpacked(node.optional_vars)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return [ast.Subscript(value=node.func.value, slice=ast.Constant(None))]
    return []


def _unpacked(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for elt in target.elts for t in _unpacked(elt)]
    if isinstance(target, ast.Starred):
        return _unpacked(target.value)
    return [target]


def _root(target: ast.expr) -> ast.Name | None:
    """``vocab`` for ``vocab["a"]["b"]`` or ``cfg.x``; the Name itself for a plain name; None otherwise."""
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    return target if isinstance(target, ast.Name) else None
