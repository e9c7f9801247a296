"""The layout is the architecture: every module imports, msnb/ has no import cycle, and the layers point one way."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import msnb
import msnb.templates

PACKAGE = Path(msnb.__file__).parent
# The TorchServe side serves any archive: it knows nothing of cells, specs or packaging.
# msnb.chunks: how a client cuts a streamed answer (a leaf: only the wire format constants of templates/)
TORCHSERVE_MAY_IMPORT = ("msnb.torchserve", "msnb.errors", "msnb.files", "msnb.chunks")
# Packing never runs user code: only localtest (called by session/export) does, through the test process it
# starts (the modules that load and drive the handler there).
RUNS_USER_CODE = {"msnb.localtest", "msnb.batchtest", "msnb.testworker", "msnb.testchild", "msnb.workerload"}
TEMPLATES = Path(msnb.templates.__file__).parent
MAX_FUNCTION_LINES = 40


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The msnb modules a file imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("msnb")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("msnb") and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in files and m != name} for name, path in files.items()}


MODULES = sorted(graph())


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    importlib.import_module(name)


def test_every_module_imports_in_a_fresh_interpreter():
    code = f"import importlib\nfor m in {MODULES!r}: importlib.import_module(m)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_there_is_no_import_cycle_inside_msnb():
    edges = graph()
    for package in [m for m in edges if (PACKAGE.parent / m.replace(".", "/") / "__init__.py").exists()]:
        edges[package] = set()  # a package's __init__ re-exports its modules: that is not a dependency
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_the_torchserve_package_imports_nothing_from_the_notebook_or_packaging_side():
    for name, deps in graph().items():
        if name.startswith("msnb.torchserve"):
            bad = [d for d in deps if not d.startswith(TORCHSERVE_MAY_IMPORT)]
            assert not bad, f"{name} imports {bad}"


def test_only_the_session_and_export_layers_decide_to_run_user_code():
    users = {name for name, deps in graph().items() if deps & RUNS_USER_CODE and name not in RUNS_USER_CODE}
    assert users <= {"msnb.session", "msnb.export"}, users
    assert "msnb.localtest" not in graph()["msnb.archive"]


def test_surfaces_hold_no_step_of_their_own():
    """The magics, the widget and the CLI reach the steps through Session / export / the torchserve client."""
    steps = {"msnb.capture", "msnb.render", "msnb.localtest"}
    for surface in ("msnb.magics", "msnb.widget.view", "msnb.widget.controller", "msnb.cli"):
        assert not graph()[surface] & (steps - {"msnb.capture"}), surface


def long_functions(root: Path) -> list[tuple[str, int]]:
    """("path::name", lines) of every function over MAX_FUNCTION_LINES (from ``def`` to its last line)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append((f"{root.name}/{path.relative_to(root).as_posix()}::{node.name}", lines))
    return found


def test_no_function_is_over_40_lines_in_the_package_and_the_templates():
    too_long = long_functions(PACKAGE) + long_functions(TEMPLATES)
    assert not too_long, f"split these into functions of <= {MAX_FUNCTION_LINES} lines: {too_long}"
