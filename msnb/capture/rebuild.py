"""Which names bound at run time travel as the statement that binds them, rebuilt on the server (loggers, locks).

A module-level ``NAME = <call>`` (``logger = logging.getLogger(__name__)``, ``lock = threading.Lock()``,
``PATTERN = re.compile(...)``, ``N = len(LABELS)``) is rebuilt by running the same statement on the server when:
it is the last binding of NAME and no later module-level statement changes or even reads NAME (``est.fit(X)`` may
change it); every name it reads travels with the handler;
it reads no file (``open``, ``*.load``: the value a kernel read is data, see RUNTIME_HINT); and either the kernel's
value cannot travel as data (a Logger, a Lock; data wins where it can: it is the value the notebook used, exactly) or,
with no kernel (``msnb export``), every call in it is a builtin, comes from a module whose calls rebuild the same
object (REBUILT_BY) or creates a notebook class with no base but ``object`` (TorchServe's ``_service =
ModelHandler()``) — never another notebook class, which could be a model with fresh random weights.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from msnb.capture.scope import BUILTINS, Stmt, import_bindings

# Modules whose calls build the same object from the same arguments (no file, no randomness).
REBUILT_BY = frozenset(
    {
        "logging",
        "threading",
        "re",
        "collections",
        "functools",
        "itertools",
        "string",
        "math",
        "operator",
        "queue",
        "contextvars",
        "weakref",
        "decimal",
        "fractions",
        "enum",
        "types",
        "typing",
        "dataclasses",
        "datetime",
        "json",
    }
)
# Calls on a logger, a lock or a compiled pattern that leave it as its statement built it (a module-level
# `logger.info("loaded")` does not make the logger a runtime value; `logger.setLevel(...)` does).
LEAVES_ALIKE = frozenset(
    {
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "log",
        "isEnabledFor",
        "getEffectiveLevel",
        "acquire",
        "release",
        "locked",
        "match",
        "fullmatch",
        "search",
        "findall",
        "finditer",
        "sub",
        "subn",
        "split",
    }
)
CALLS_READING_FILES = ("open",)  # and any call named load / *load (torch.load, json.load, np.load, pickle.load)
_MISSING = object()


@dataclass
class Rebuild:
    """Decides, for each statement capture would otherwise refuse or snapshot, whether it travels as code."""

    stmts: list[Stmt]  # every executed statement, in order (other cells, then the handler cell)
    namespace: Mapping[str, Any] | None = None
    bound: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # local name -> the top-level module it imports
    plain: set[str] = field(default_factory=set)  # notebook classes with no base but object: never a model

    def __post_init__(self) -> None:
        for stmt in self.stmts:
            for name in stmt.defines:
                self.bound.setdefault(name, []).append(stmt.pos)
                self.plain.discard(name)
            if stmt.kind == "import":
                self.modules.update(_imported_modules(stmt.node))
            if isinstance(stmt.node, ast.ClassDef) and all(ast.unparse(b) == "object" for b in stmt.node.bases):
                self.plain.add(stmt.node.name)

    def as_code(self, stmt: Stmt, changed_later: Iterable[str] = ()) -> bool:
        """True when ``stmt`` travels as code (see the module's rules); ``changed_later``: names it binds that a
        later statement changes in place."""
        value = _assigned(stmt)
        if value is None or set(changed_later) or not _pure(value):
            return False
        if any(self.bound[n][-1] != stmt.pos for n in stmt.defines):
            return False  # rebound later: the kernel's value is not this statement's
        if self._used_later(stmt):
            return False  # `est.fit(X)` after `est = Estimator()`: a method may have changed it
        if any(n not in BUILTINS and n not in self.bound for n in stmt.usage.uses):
            return False
        values = [self.namespace.get(n, _MISSING) for n in stmt.defines] if self.namespace is not None else []
        if values and _MISSING not in values:
            return all(_not_data(v) for v in values)
        return all(self._rebuilt_alike(call) for call in ast.walk(value) if isinstance(call, ast.Call))

    def _used_later(self, stmt: Stmt) -> bool:
        """Whether a later module-level statement may change a name ``stmt`` binds through a call: a method of it
        (``est.fit(X)``, ``logger.setLevel(...)``) or a call statement it is passed to (``train(est)``)."""
        later = [s for s in self.stmts if s.pos > stmt.pos and s.kind not in ("def", "import", "doc")]
        value = _assigned(stmt)
        calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)] if value is not None else []
        alike = LEAVES_ALIKE if calls and all(self._from_module(call) for call in calls) else frozenset()
        return any(_calls_with(s.node, stmt.defines, alike) for s in later)

    def _from_module(self, call: ast.Call) -> bool:
        """Whether ``call`` is a call into a module of REBUILT_BY (``logging.getLogger``, ``re.compile``)."""
        root = call.func
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and self.modules.get(root.id) in REBUILT_BY

    def _rebuilt_alike(self, call: ast.Call) -> bool:
        root = call.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        if root.id in self.modules:
            return self.modules[root.id] in REBUILT_BY
        if root.id in self.plain:  # TorchServe's `_service = ModelHandler()`: a plain object, built the same way
            return True
        return root.id in BUILTINS and root.id not in self.bound


def _calls_with(node: ast.stmt, names: set[str], alike: frozenset = frozenset()) -> bool:
    """Whether ``node`` calls a method of one of ``names`` (one in ``alike`` excepted: it leaves the object as it was)
    or passes one to a call statement."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        root = call.func
        while isinstance(root, ast.Attribute):
            root = root.value
        skip = isinstance(call.func, ast.Attribute) and call.func.value is root and call.func.attr in alike
        if call.func is not root and isinstance(root, ast.Name) and root.id in names and not skip:
            return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return any(isinstance(a, ast.Name) and a.id in names for a in node.value.args)
    return False


def _assigned(stmt: Stmt) -> ast.expr | None:
    """The value of a one-name ``NAME = value`` / ``NAME: T = value`` statement that calls something; else None."""
    node = stmt.node
    if stmt.kind != "runtime":
        return None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        value = node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        value = node.value
    else:
        return None
    return value if any(isinstance(n, ast.Call) for n in ast.walk(value)) else None


def _pure(value: ast.expr) -> bool:
    """No function value (a lambda travels with def), no generator, no file read."""
    for node in ast.walk(value):
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            return False
        if isinstance(node, ast.Call) and _reads_file(node.func):
            return False
    return True


def _reads_file(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in CALLS_READING_FILES or name.endswith("load")


def _not_data(value: Any) -> bool:
    """A kernel value that cannot travel as data, is not a model (whose weights go in --checkpoint) and is not a
    Hugging Face object (saved with save_pretrained: msnb.capture.hf_objects)."""
    import torch

    from msnb.capture import hf_objects
    from msnb.capture.kernel_values import unsupported

    return unsupported(value) is not None and not isinstance(value, torch.nn.Module) and not hf_objects.travels(value)


def _imported_modules(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    if isinstance(node, ast.ImportFrom):
        top = (node.module or "").split(".")[0] if not node.level else ""
        return {name: top for name in import_bindings(node)}
    return {name: alias.name.split(".")[0] for name, alias in import_bindings(node).items()}
