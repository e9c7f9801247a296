"""Each fact in one place: the shared handler's module list, the folder and prefix names, TorchServe's defaults."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import msnb
import msnb.templates
from msnb.engines.tracebacks import is_library_frame
from msnb.options import OPTIONS, handler_magic

PACKAGE = Path(msnb.__file__).parent
TEMPLATES = Path(msnb.templates.__file__).parent
# A fact spelled as a literal -> the modules allowed to spell it (each defines it once and the others import it).
FACTS = {
    "/mnt/models": {"msnb.engines.kserve"},  # KSERVE_MOUNT
    "model-store": {"msnb.engines.kserve"},  # KSERVE_STORE_DIR
    "model_store": {
        "msnb.package.formats",
        "msnb.engines.store",
        "msnb.engines.torchserve.config",
        "msnb.engines.kserve.layout",
        "msnb.engines.ts_properties",
    },  # DEFAULT_EXPORT; STORE_DIR; its key (written by torchserve.config and kserve.layout, read by ts_properties)
    "msnb-server-": {"msnb.engines.watchdog"},  # TEMP_PREFIX
    "no-archive": {"msnb.package.formats"},  # SERVE_FORMAT (and the archiver's name of that format)
    120: {"msnb.templates.msnb_runtime.handler.serving"},  # DEFAULT_RESPONSE_TIMEOUT_S
}
# The model folder's file names, shared across the boundary: spelled only in templates/msnb_runtime/handler/names.py, by msnb/ and by
# the runtime shipped in every archive alike.
NAMES = "msnb.templates.msnb_runtime.handler.names"
FOLDER_NAMES = (
    "handler_model",
    "handler_model.py",
    "model-config.yaml",
    "requirements.txt",
    "model.pt",
    "values.pt",
    "hf_objects",
    "model_file.py",
    "MAR-INF/MANIFEST.json",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def literals(path: Path) -> list[tuple[int, object]]:
    """(line, value) of every str or int constant of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and id(node) not in docstrings and type(node.value) in (str, int)
    ]


def spells(value: object, fact: object) -> bool:
    """The literal is the fact (a path is found inside a longer string too; prose may name a format)."""
    if isinstance(fact, str) and fact.startswith("/"):
        return isinstance(value, str) and fact in value
    return type(value) is type(fact) and value == fact


def test_the_shared_handler_list_is_every_module_of_the_runtime_s_handler_room():
    runtime = TEMPLATES / msnb.templates.RUNTIME
    rooms = {p.name for p in runtime.iterdir() if (p / "__init__.py").is_file()}
    assert {"handler", "ts", "api", "ray", "kserve", "dev"} == rooms
    on_disk = {p for p in (runtime / "handler").glob("*.py")} | {runtime / "__init__.py"}
    # TorchServe's interfaces where no TorchServe runs (its Context, loader, wire format, checks), the protocols and
    # the Ray applications serve model folders: no archive carries them
    assert set(msnb.templates.shared_handler_files()) == on_disk
    assert not set(msnb.templates.ARCHIVE_ROOMS) & {"ts", "api", "ray", "kserve", "dev"}


def test_no_module_spells_a_shared_module_name_it_imports_the_list():
    names = {msnb.templates.RUNTIME}
    for path in PACKAGE.rglob("*.py"):
        spelled = [(line, value) for line, value in literals(path) if value in names]
        assert not spelled, f"{module_name(path)} spells {spelled}: import msnb.templates.RUNTIME"


def test_tracebacks_fold_the_frames_of_every_shared_module():
    for _, inside in msnb.templates.runtime_files(msnb.templates.ARCHIVE_ROOMS):
        assert is_library_frame(f"/srv/model-dir/{inside}"), inside
    assert not is_library_frame("/srv/model-dir/handler_model.py")


def test_each_fact_is_spelled_only_where_it_is_defined():
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        for line, value in literals(path):
            for fact, owners in FACTS.items():
                assert name in owners or not spells(value, fact), (
                    f"{name}:{line} spells {fact!r}; import it from {' or '.join(sorted(owners))}"
                )


def test_each_option_default_is_said_once_and_comes_from_the_options_table():
    help_text = " ".join(handler_magic().__doc__.split())
    for option in OPTIONS:
        if option.default not in (None, ()):
            repeated = re.search(rf"default:? {re.escape(str(option.default))}\b", option.help)
            assert not repeated, f"{option.flag}: the help repeats its default; the OPTIONS row says it"
            assert f"(default: {option.default})" in help_text, option.flag


def module_level_assignments(path: Path) -> list[tuple[str, int]]:
    """(name, line) of every module-level ``NAME = ...`` (annotated or not), in order."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            for leaf in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(leaf, ast.Name) and leaf.id.isupper():  # NAME.attr = ... sets an attribute, not NAME
                    found.append((leaf.id, node.lineno))
    return found


def test_no_module_assigns_one_constant_twice_in_the_package_or_the_shipped_runtime():
    for path in [*PACKAGE.rglob("*.py"), *TEMPLATES.rglob("*.py")]:
        seen: dict[str, int] = {}
        for name, line in module_level_assignments(path):
            assert name not in seen, f"{path.name} assigns {name} twice (lines {seen[name]} and {line}): keep one"
            seen[name] = line


def test_the_model_folder_names_are_spelled_only_in_msnb_names_on_both_sides_of_the_archive():
    for path in [*PACKAGE.rglob("*.py"), *TEMPLATES.rglob("*.py")]:
        inside = () if path.is_relative_to(PACKAGE) else path.relative_to(TEMPLATES).with_suffix("").parts
        name = module_name(path) if path.is_relative_to(PACKAGE) else ".".join(("msnb.templates", *inside))
        if name == NAMES:
            continue
        spelled = [(line, value) for line, value in literals(path) if value in FOLDER_NAMES]
        assert not spelled, f"{name} spells {spelled}: import it from {NAMES}"
