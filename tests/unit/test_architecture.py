"""The layout is the architecture: every module imports, no import cycle, and each folder imports only the folders
below it (the rules below are the ones docs/architecture.md states, folder by folder)."""

from __future__ import annotations

import ast
import functools
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import msnb
import msnb.templates

PACKAGE = Path(msnb.__file__).parent
TEMPLATES = Path(msnb.templates.__file__).parent
RUNTIME = TEMPLATES / msnb.templates.RUNTIME  # the runtime package every model folder carries, a room per part
# Imported only where their engine's extra is installed (each is tested in its own environment: tests/cli, tests/ray).
EXTRA_ONLY = ("msnb.templates.msnb_runtime.kserve",)
MAX_FUNCTION_LINES = 40
MAX_MODULE_LINES = 500
# The shared vocabulary at the top of msnb/: every step speaks it; it imports only itself and the shipped runtime
# (no engine: a handler's description does not stand on a server).
VOCABULARY = {"msnb.errors", "msnb.files", "msnb.options", "msnb.spec", "msnb.roles", "msnb.forms"}
BASE = ("msnb.errors", "msnb.files", "msnb.templates")
# Each folder, top to bottom, and what it may import besides itself: every arrow points down.
MAY_IMPORT = {
    "msnb.engines": BASE,
    "vocabulary": (*VOCABULARY, "msnb.templates"),
    "msnb.capture": (*VOCABULARY, "msnb.engines", "msnb.templates"),
    "msnb.package": (*VOCABULARY, "msnb.engines", "msnb.templates", "msnb.capture"),
    "msnb.trial": (*VOCABULARY, "msnb.engines", "msnb.templates", "msnb.capture", "msnb.package"),
    "msnb.session": (*VOCABULARY, "msnb.engines", "msnb.templates", "msnb.capture", "msnb.package", "msnb.trial"),
    "msnb.ui": (
        *VOCABULARY,
        "msnb.engines",
        "msnb.session",
        "msnb.package.formats",
        "msnb.capture.requirement_rules",
        "msnb.capture.magic_lines",
    ),
    "msnb.cli": (
        *VOCABULARY,
        "msnb.engines",
        "msnb.templates",
        "msnb.capture",
        "msnb.package",
        "msnb.trial",
        "msnb.session",
    ),
}
# The engines stand beside each other: the modules at the top of msnb/engines/ (the protocol and what both engines
# speak: TorchServe's inference API, keys, store, process trees) import neither engine, and neither engine imports
# the other (Ray's router answers TorchServe's inference URLs: both speak them through msnb.engines.inference_api).
ENGINES = ("msnb.engines.torchserve", "msnb.engines.ray")
# KServe's layouts (it is not an engine msnb starts): its TorchServe runtime is a TorchServe, so its layout writes
# TorchServe's config.properties; that module is all it takes of an engine.
KSERVE, KSERVE_STANDS_ON = "msnb.engines.kserve", ("msnb.engines.torchserve.config",)
# The export layouts, each with its engine.
LAYOUTS = ("msnb.engines.ray.export", "msnb.engines.kserve.layout", "msnb.engines.kserve.python_layout")
# The engines msnb ships (their EngineKind's ``kind``).
ENGINE_KINDS = ("torchserve", "ray")
# The one module that lists the engines: it imports each engine's package (its declaration, ``ENGINE``) and nothing
# else of them.
REGISTRY = "msnb.engines.registry"
# The model folder is the one hand-off: only its module stages one from a spec or opens one from an archive, and the
# trial takes nothing of the package but the folder it runs (and the rendered handler's names).
STAGES_OR_OPENS = {"msnb.package.staging", "msnb.package.mar_checks"}
TRIAL_TAKES_FROM_PACKAGE = {"msnb.package.model_folder", "msnb.package.render"}
# Only these run user code (in the test process they start); only the session and the export pipeline decide to.
RUNS_USER_CODE = "msnb.trial"
DECIDES_TO_RUN_USER_CODE = {"msnb.session.core", "msnb.session.export"}


def module_name(path: Path) -> str:
    """msnb's name of a module of the package or of the runtime package (``msnb.templates.msnb_runtime.ROOM.X``)."""
    if path.is_relative_to(TEMPLATES):
        parts = ("msnb", "templates", *path.relative_to(TEMPLATES).with_suffix("").parts)
    else:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module a relative ``from`` import names, from the importing file's place."""
    package = module_name(path).split(".")
    package = package if path.name == "__init__.py" else package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (annotations only: never imported at run time)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            found |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return found


def imports_of(path: Path) -> set[str]:
    """The msnb modules a file imports at run time, at module level or inside functions."""
    tree = ast.parse(path.read_text())
    skip, found = _type_checking_only(tree), set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("msnb")}
        elif isinstance(node, ast.ImportFrom) and node.level:
            module = _absolute(node, path)
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("msnb"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


@functools.cache
def _parsed_graph() -> dict[str, frozenset[str]]:
    files = {module_name(p): p for p in [*PACKAGE.rglob("*.py"), *RUNTIME.rglob("*.py"), TEMPLATES / "__init__.py"]}
    return {name: frozenset(m for m in imports_of(path) if m in files and m != name) for name, path in files.items()}


def graph() -> dict[str, set[str]]:
    """Each msnb module -> the msnb modules it imports. The sources are parsed once per process (each parse of the
    package was about 1 s, and a dozen tests ask); each call gets its own copy, which a test may change."""
    return {name: set(deps) for name, deps in _parsed_graph().items()}


def folder_of(module: str) -> str:
    if module in VOCABULARY:
        return "vocabulary"
    return ".".join(module.split(".")[:2])


MODULES = sorted(m for m in graph() if not m.startswith(EXTRA_ONLY))


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
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_the_top_of_msnb_is_the_vocabulary_and_the_step_folders():
    top = sorted(p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__")))
    folders = {name.split(".")[1] for name in MAY_IMPORT if name.startswith("msnb.")}
    modules = {m.split(".")[1] + ".py" for m in VOCABULARY}
    assert set(top) == folders | modules | {"__init__.py"}, top
    assert len(top) < 15


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_each_folder_imports_only_the_folders_below_it(folder):
    for name, deps in graph().items():
        if name == "msnb" or folder_of(name) != folder:
            continue
        own = () if folder == "vocabulary" else (folder,)
        bad = sorted(d for d in deps if d != "msnb" and not d.startswith((*MAY_IMPORT[folder], *own)))
        assert not bad, f"{name} ({folder}) imports {bad}: only {MAY_IMPORT[folder]} may be imported there"


def test_the_engine_neutral_modules_import_neither_engine():
    neutral = [n for n in graph() if n.startswith("msnb.engines.") and not n.startswith(ENGINES) and n != REGISTRY]
    assert "msnb.engines.protocol" in neutral
    for name in neutral:
        stands_on = KSERVE_STANDS_ON if name.startswith(KSERVE) else ()
        bad = sorted(d for d in graph()[name] if d.startswith(ENGINES) and d not in stands_on)
        assert not bad, f"{name} is shared by both engines but imports {bad}"


def test_neither_engine_imports_the_other():
    assert "msnb.engines.inference_api" in graph()
    for name, deps in graph().items():
        for engine, other in (ENGINES, ENGINES[::-1]):
            if name.startswith(engine):
                taken = sorted(d for d in deps if d.startswith(other))
                assert not taken, f"{name} imports {taken} from {other}"


def test_outside_the_engines_an_engine_is_reached_only_through_the_registry():
    """No module outside msnb/engines/ imports Ray's or TorchServe's engine (their packages or modules): the registry
    (``msnb.engines.registry``) and the protocol (``msnb.engines.protocol``) are the one door."""
    for name, deps in graph().items():
        if name.startswith("msnb.engines") or name == "msnb":
            continue
        taken = sorted(d for d in deps if d.startswith(ENGINES))
        assert not taken, f"{name} imports {taken}: reach an engine through {REGISTRY} and its EngineKind"


# The names the callers outside msnb/engines/ hold an engine, its start options or its registry entry under.
ENGINE_HOLDERS = ("engine", "server", "_server", "ray", "api", "kind")


def _callers() -> list[tuple[str, ast.AST]]:
    """(module, node) of every node of the modules outside msnb/engines/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if not path.is_relative_to(PACKAGE / "engines"):
            found += [(module_name(path), node) for node in ast.walk(ast.parse(path.read_text()))]
    return found


def _holder(node: ast.AST) -> str | None:
    """The name an expression reads through: ``engine`` of ``engine`` and of ``self.engine``."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def test_no_getattr_on_an_engine_outside_the_engines():
    """A caller asks an engine (its start options, its registry entry) only for what the protocol declares, so it
    never needs ``getattr`` or ``hasattr`` to find out whether a member is there."""
    for module, node in _callers():
        if isinstance(node, ast.Call) and _holder(node.func) in ("getattr", "hasattr") and node.args:
            assert _holder(node.args[0]) not in ENGINE_HOLDERS, f"{module}:{node.lineno}: {ast.unparse(node)}"


def _members(cls: type) -> set[str]:
    """The public members of a class: its attributes and those its methods set on ``self``."""
    import inspect

    tree = ast.parse(Path(inspect.getfile(cls)).read_text())
    targets = [t for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets]
    targets += [n.target for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)]
    targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    own = {t.attr for t in targets if isinstance(t, ast.Attribute) and _holder(t.value) == "self"}
    return {n for n in {*dir(cls), *own} if not n.startswith("_")}


def test_every_engine_member_a_caller_uses_is_declared_in_the_protocol():
    """What a caller outside msnb/engines/ asks of an engine it holds is the ``Engine`` protocol's: no member that
    only TorchServe's or only Ray's engine has (``register``, ``scale``, ``ports`` ...) is read there."""
    from msnb.engines import protocol, registry

    declared = {n for n in dir(protocol.Engine) if not n.startswith("_")} | set(protocol.Engine.__annotations__)
    engines = [registry.get(k).type_name.rsplit(".", 1) for k in ENGINE_KINDS]
    only = set().union(*(_members(getattr(importlib.import_module(m), c)) for m, c in engines)) - declared
    assert {"register", "scale"} <= only, sorted(only)  # TorchServe's own calls, which Ray answers over HTTP only
    used = [
        f"{module}:{node.lineno}: {ast.unparse(node)}"
        for module, node in _callers()
        if isinstance(node, ast.Attribute) and node.attr in only and _holder(node.value) in ENGINE_HOLDERS[:4]
    ]
    assert not used, f"not in msnb.engines.protocol.Engine: {used}"


def test_only_the_model_folder_module_stages_or_opens_a_model_folder():
    for name, deps in graph().items():
        used = {d for d in deps if d.startswith(tuple(STAGES_OR_OPENS))}
        assert not used or name in {"msnb.package.model_folder", *STAGES_OR_OPENS}, f"{name} imports {sorted(used)}"


def test_the_trial_runs_a_model_folder_and_takes_nothing_else_of_the_package():
    for name, deps in graph().items():
        if name.startswith("msnb.trial"):
            taken = {".".join(d.split(".")[:3]) for d in deps if d.startswith("msnb.package")}
            assert taken <= TRIAL_TAKES_FROM_PACKAGE, f"{name} imports {sorted(taken)} from msnb.package"


def test_export_is_a_surface_over_the_pipeline_and_each_layout_lives_with_its_engine():
    """The export's layouts sit with their engine (Ray's in msnb/engines/ray/, KServe's two in msnb/engines/kserve/),
    are given the model folders by the pipeline (``msnb.session.export``) and import nothing of the package."""
    deps = graph()
    assert not {d for d in deps["msnb.session.export"] if d.startswith("msnb.cli")}
    assert not {d for d in deps["msnb.cli.export"] if d.startswith(("msnb.trial", "msnb.package.import_check"))}
    layouts = {n for n in deps if n.endswith(("layout", ".export")) and n.startswith("msnb.engines")}
    assert layouts == set(LAYOUTS), layouts
    for name in layouts:
        taken = sorted(d for d in deps[name] if d.startswith(("msnb.package", "msnb.spec", "msnb.session")))
        assert not taken, f"{name} imports {taken}: a layout is given the model folders, it does not build them"


def test_only_the_session_and_export_decide_to_run_user_code():
    users = {n for n, deps in graph().items() if any(d.startswith(RUNS_USER_CODE) for d in deps)}
    assert {u for u in users if not u.startswith(RUNS_USER_CODE)} <= DECIDES_TO_RUN_USER_CODE, users


def test_the_surfaces_hold_no_step_of_their_own():
    """The magics and the widget reach the steps through the session; they import no step module."""
    steps = {"msnb.capture.cells", "msnb.capture.notebook", "msnb.package.render", "msnb.package.archive"}
    for name, deps in graph().items():
        if name.startswith("msnb.ui"):
            assert not deps & steps and not any(d.startswith(RUNS_USER_CODE) for d in deps), name


def test_import_msnb_loads_neither_torch_nor_ipython():
    code = "import sys, msnb; print(sorted(m for m in ('torch', 'IPython', 'ts') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv", [["--help"], ["export", "--help"], ["serve", "--help"], ["predict", "--help"], ["shadow", "--help"]]
)
def test_the_commands_help_imports_neither_ipython_nor_torch_nor_a_step(argv):
    """`msnb --help` parses and prints only: IPython, torch and the capture / package-building / trial / session
    steps load after parsing, for the command that needs them."""
    heavy = ("torch", "IPython", "ts", "nbformat", "msnb.capture", "msnb.trial", "msnb.session", "msnb.package.")
    code = (
        f"import sys\nfrom msnb.cli.main import main\ncode = main({argv!r})\n"
        f"print(code, sorted(m for m in sys.modules if m.startswith({heavy!r}) and m != 'msnb.package.formats'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "usage: msnb" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "0 []"


def test_the_vocabulary_imports_no_ipython():
    """msnb.errors and msnb.options load without IPython: the magics add IPython's UsageError to an OptionError."""
    code = "import sys, msnb.errors, msnb.options; print(sorted(m for m in ('IPython', 'torch') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_msnb_without_the_ray_extra_imports_everything_but_the_ray_engine():
    """Ray and what it brings (Starlette, uvicorn, aiohttp) come with the `ray` extra only: every other module,
    the TorchServe engine's fronts included, imports where they are absent (the install tier's clean venv too)."""
    ray = ("msnb.engines.ray", "msnb.templates.msnb_runtime.ray", *EXTRA_ONLY)
    modules = sorted(n for n in graph() if not n.startswith(ray))
    code = (
        "import importlib, sys\n"
        "for name in ('ray', 'starlette', 'uvicorn', 'aiohttp', 'fastapi'):\n    sys.modules[name] = None\n"
        f"for module in {modules!r}:\n    importlib.import_module(module)\nprint('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_watchdog_process_imports_only_the_standard_library_and_psutil():
    code = (
        "import runpy, sys; sys.argv = ['watchdog', '--help']\n"
        "import msnb.engines.watchdog\n"
        "print(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
        "('torch', 'IPython', 'yaml', 'requests', 'ts', 'numpy')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


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


def test_no_module_is_over_500_lines():
    long = [
        (p.name, n)
        for p in [*PACKAGE.rglob("*.py"), *TEMPLATES.rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, long


def test_the_registry_imports_only_each_engines_declaration():
    taken = sorted(d for d in graph()[REGISTRY] if d.startswith(ENGINES))
    assert taken == ["msnb.engines.ray", "msnb.engines.torchserve"], taken


def engine_name_branches(paths: list[Path], names: tuple[str, ...]) -> list[str]:
    """``path:line`` of every comparison with an engine's name (``engine == "ray"``, ``kind in ("ray", ...)``)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                values = {n.value for o in operands for n in ast.walk(o) if isinstance(n, ast.Constant)}
                if values & set(names):
                    found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}")
    return found


def test_no_code_outside_the_engines_branches_on_an_engines_name():
    from msnb.engines import registry

    outside = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "engines")
    found = engine_name_branches(outside, registry.kinds())
    assert not found, f"ask the registry (msnb.engines.registry) or hold an Engine instead: {found}"


def test_no_template_module_has_a_dual_import_block_and_the_runtime_imports_its_neighbours_relatively():
    """One import idiom: inside the runtime package a module takes its neighbours by relative import, never by a
    top-level name (``msnb_runtime.X`` or ``msnb.templates.X``) and never by trying one name then the other, so that
    whichever name the package is imported under, its modules are its own (msnb.templates' docstring says why)."""
    for path in sorted(TEMPLATES.rglob("*.py")):
        tree = ast.parse(path.read_text())
        dual = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.If) and "__package__" in ast.unparse(n.test)]
        assert not dual, f"{path.relative_to(TEMPLATES)}:{dual}: an `if __package__:` import block; import relatively"
        if not path.is_relative_to(RUNTIME):
            continue
        stray = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            and not getattr(n, "level", 0)
            and any(m.split(".")[0] in ("msnb", "msnb_runtime") for m in _imported(n))
        ]
        assert not stray, (
            f"{path.relative_to(TEMPLATES)}:{stray} imports msnb or msnb_runtime by name: import relatively"
        )


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]


def test_the_entry_files_and_templates_import_the_runtime_as_a_model_folder_does():
    """What a server runs from a folder's top (the rendered handler, the dev entry, KServe's predictor) imports the
    runtime package by its top-level name, as every model folder holds it."""
    for path in [
        *TEMPLATES.glob("*.tmpl"),
        TEMPLATES / msnb.templates.DEV_ENTRY,
        TEMPLATES / msnb.templates.KSERVE_ENTRY,
    ]:
        text = path.read_text()
        assert f"from {msnb.templates.RUNTIME}." in text, path.name
        assert "from msnb." not in text and "import msnb." not in text, path.name


def test_what_both_engines_use_is_named_for_its_job_not_for_ray():
    """The modules every engine shares (msnb/engines/ outside the Ray engine, the stand-in engine of the tests) use
    TorchServe's interfaces from the runtime's ts room, never its ray room."""
    standin = PACKAGE.parent / "tests" / "standin"
    shared = [p for p in PACKAGE.joinpath("engines").rglob("*.py") if "ray" not in p.relative_to(PACKAGE).parts]
    for path in [*shared, *standin.glob("*.py")]:
        ray_named = sorted(m for m in imports_of(path) if m.startswith("msnb.templates.msnb_runtime.ray"))
        assert not ray_named, f"{path.name} imports {ray_named}: what both engines use lives in the runtime's ts room"


def _defined(statements: list[ast.stmt]) -> set[str]:
    """The names a module's top level binds (inside its ``if`` / ``try`` blocks too)."""
    names: set[str] = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _defined([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
            names |= _defined([s for h in getattr(node, "handlers", []) for s in h.body])
    return names


def test_every_name_a_template_module_takes_from_a_neighbour_is_defined_there():
    """``from .x import NAME`` and ``x.NAME`` after ``from . import x``: NAME is defined in x (a name moved to another
    module fails here, not in a replica or an exported folder that no unit test imports)."""
    paths = {module_name(p): p for p in RUNTIME.rglob("*.py")}
    defined = {name: _defined(ast.parse(p.read_text()).body) for name, p in paths.items()}
    for name, path in sorted(paths.items()):
        tree = ast.parse(path.read_text())
        aliases, missing = {}, []
        for node in [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level]:
            module = _absolute(node, path)
            for a in node.names:
                if f"{module}.{a.name}" in paths:  # a module of a room
                    aliases[a.asname or a.name] = f"{module}.{a.name}"
                elif a.name not in defined.get(module, {a.name}):
                    missing.append(f"{module}.{a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if node.attr not in defined[aliases[node.value.id]]:
                    missing.append(f"{aliases[node.value.id]}.{node.attr}")
        assert not missing, f"{name} takes {sorted(set(missing))}, which its neighbours do not define"
