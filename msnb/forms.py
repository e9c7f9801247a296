"""Which form a handler cell uses: msnb's roles, the user's own handler class, or a module-level ``handle``.

Detection reads the cell's definitions (ast), never runs it. A handler class is a class whose base is
TorchServe's ``BaseHandler`` (or another class imported from ``ts.torch_handler``), or any class that
defines ``handle``; a function form is a top-level ``def handle(data, context)``.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msnb.errors import SpecError
from msnb.templates.msnb_runtime.handler.names import (
    MODEL_FILE,  # the manifest's modelFile (BaseHandler imports it by name)
)

ROLES_FORM, CLASS_FORM, FUNCTION_FORM = "roles", "class", "function"
FORMS = {
    ROLES_FORM: "init_function / preprocess / postprocess, run by msnb's shared handler",
    CLASS_FORM: "your handler class (a BaseHandler subclass, or a class with initialize and handle)",
    FUNCTION_FORM: "your module-level handle(data, context)",
}
ENTRY_FUNCTION = "handle"
ENTRY_PARAMETERS = ("data", "context")
# TorchServe's default handlers (ts/torch_handler/<name>.py and its class), which `--handler NAME` names as
# torch-model-archiver does. The vision ones import torchvision.
DEFAULT_HANDLERS = {
    "base_handler": "BaseHandler",
    "image_classifier": "ImageClassifier",
    "text_classifier": "TextClassifier",
    "object_detector": "ObjectDetector",
    "image_segmenter": "ImageSegmenter",
}


def default_handler_import(entry: str) -> str | None:
    """``from ts.torch_handler.text_classifier import TextClassifier`` for a default handler's name, else None."""
    cls = DEFAULT_HANDLERS.get(entry)
    return f"from {TS_HANDLER_MODULE}.{entry} import {cls}" if cls else None


TS_HANDLER_MODULE = "ts.torch_handler"
CHOOSE = (
    "use one form per handler cell: either init_function (+ preprocess/postprocess), "
    "or one handler class, or a module-level handle(data, context)"
)


@dataclass(frozen=True)
class Form:
    """A cell's form and its entry: the class or function name TorchServe will call (empty for roles)."""

    kind: str
    entry: str = ""

    @property
    def label(self) -> str:
        return {CLASS_FORM: f"class {self.entry}", FUNCTION_FORM: f"{self.entry}(data, context)"}.get(self.kind, "")


def detect(tree: ast.Module, roles: Mapping[str, str], known: Collection[str] = (), entry: str | None = None) -> Form:
    """The form of a parsed cell, given the roles it defines, the handler classes other cells define
    (``known``, see ``handler_class_names``) and the entry point the user named (``--handler NAME``, as
    torch-model-archiver's ``--handler file:NAME``); a mixed or ambiguous cell is a SpecError."""
    ts_names = _imported_from_ts(tree) | set(known)
    classes = handler_classes(tree, ts_names)
    if entry:
        return _named_entry(tree, entry, ts_names)
    function = _entry_function(tree, roles, classes)
    own = [f"handler class `{c.name}`" for c in classes] + ([f"a module-level `{function.name}`"] if function else [])
    if "init_function" in roles and own:
        raise SpecError(f"The cell defines both init_function (roles) and {own[0]}.", CHOOSE + ".")
    if function:  # TorchServe calls a module-level handle before it looks for a class
        check_function(function)
        return Form(FUNCTION_FORM, function.name)
    if len(classes) > 1:
        names = ", ".join(f"`{c.name}`" for c in classes)
        raise SpecError(
            f"The cell defines {len(classes)} handler classes ({names}); TorchServe can call only one.",
            "keep the class TorchServe should call in this cell and move the other one (e.g. a base class) "
            "to a cell above (msnb pulls it in when the handler uses it), or name it with --handler NAME.",
        )
    if classes:
        check_class(classes[0], ts_names)
        return Form(CLASS_FORM, classes[0].name)
    return Form(ROLES_FORM)


def _entry_function(
    tree: ast.Module, roles: Mapping[str, str], classes: list[ast.ClassDef]
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """A module-level ``handle``; else, in a cell with no handler class and no init_function, the one function
    taking ``(data, context)`` (TorchServe's ``--handler file:NAME`` entry point of any name)."""
    functions = _functions(tree)
    handle = next((n for n in functions if n.name == ENTRY_FUNCTION), None)
    if handle is not None or classes or "init_function" in roles:
        return handle
    found = [n for n in functions if [a.arg for a in n.args.posonlyargs + n.args.args] == list(ENTRY_PARAMETERS)]
    if len(found) > 1:
        names = ", ".join(f"`{n.name}`" for n in found)
        raise SpecError(
            f"The cell defines {len(found)} functions taking (data, context) ({names}); TorchServe calls one.",
            f"name the entry point with --handler {found[0].name} (torch-model-archiver's --handler file:NAME).",
        )
    return found[0] if found else None


def _named_entry(tree: ast.Module, entry: str, ts_names: set[str]) -> Form:
    """The function or class ``--handler NAME`` names, checked like any entry point."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            check_function(node)
            return Form(FUNCTION_FORM, entry)
        if isinstance(node, ast.ClassDef) and node.name == entry:
            check_class(node, ts_names)
            return Form(CLASS_FORM, entry)
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if entry in DEFAULT_HANDLERS:  # TorchServe's own class; capture imports it (default_handler_import)
        return Form(CLASS_FORM, DEFAULT_HANDLERS[entry])
    raise SpecError(
        f"--handler {entry}: the cell defines no function or class named `{entry}`.",
        f"name one the cell defines ({', '.join(defined) or 'none'}), or one of TorchServe's default handlers "
        f"({', '.join(DEFAULT_HANDLERS)}).",
    )


def handler_classes(tree: ast.Module, ts_names: set[str]) -> list[ast.ClassDef]:
    """Top-level classes that are TorchServe handlers: a ``handle`` method, or a base that is a handler
    (from ``ts.torch_handler``, named in ``ts_names``, or a handler class defined above it)."""
    found: list[ast.ClassDef] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        if ENTRY_FUNCTION in _methods(node) or _has_ts_base(node, ts_names | {c.name for c in found}):
            found.append(node)
    return found


def handler_class_names(trees: Iterable[ast.Module]) -> set[str]:
    """The handler classes a sequence of cells defines (in order: a subclass of an earlier one counts)."""
    names: set[str] = set()
    for tree in trees:
        names |= {c.name for c in handler_classes(tree, _imported_from_ts(tree) | names)}
    return names


def check_class(node: ast.ClassDef, ts_names: set[str]) -> None:
    """A handler class needs ``initialize`` and ``handle`` (a ts.torch_handler base provides both)."""
    if _has_ts_base(node, ts_names):
        return
    missing = [m for m in ("initialize", ENTRY_FUNCTION) if m not in _methods(node)]
    if missing:
        raise SpecError(
            f"Handler class `{node.name}` (line {node.lineno}) has no `{missing[0]}` method.",
            "TorchServe creates the class with no arguments, calls `initialize(self, context)` once to load the "
            "model, then `handle(self, data, context)` per batch; define both, or subclass "
            "ts.torch_handler.base_handler.BaseHandler.",
        )


def check_function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """A module-level ``handle`` is called as ``handle(data, context)``: two positional parameters, not async."""
    args = node.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults)
    if isinstance(node, ast.AsyncFunctionDef) or required > 2 or (len(positional) < 2 and not args.vararg):
        raise SpecError(
            f"`{node.name}` (line {node.lineno}) has the wrong signature.",
            "TorchServe calls `def handle(data, context)`: `data` is None once at load, then a list of requests.",
        )


def check_checkpoint(tree: ast.Module, entry: str, checkpoint: Any) -> None:
    """Refuse a handler class that keeps BaseHandler's own loading (``torch.jit.load`` of the checkpoint,
    as msnb archives no eager model file) with a checkpoint that is not TorchScript: it could never load."""
    if checkpoint is None or not _loads_like_base_handler(tree, entry):
        return
    what = _not_torchscript(checkpoint)
    if what and not model_classes(tree):  # with one, eager mode: it becomes the model file (msnb.forms)
        from msnb.templates.msnb_runtime.handler.custom_handler import (
            TORCHSCRIPT_HINT,  # the hint the worker gives when it fails there
        )

        raise SpecError(
            f"Handler class `{entry}` keeps BaseHandler's initialize, which loads the checkpoint with "
            f"torch.jit.load, and {what} is not TorchScript.",
            TORCHSCRIPT_HINT,
        )


def eager(tree: ast.Module, entry: str, checkpoint: Any) -> bool:
    """True when BaseHandler.initialize will load an eager model: the handler keeps it, the checkpoint is not
    TorchScript and the code defines a model class (msnb.forms writes it as the model file)."""
    return (
        checkpoint is not None
        and _loads_like_base_handler(tree, entry)
        and _not_torchscript(checkpoint) is not None
        and bool(model_classes(tree))
    )


def _loads_like_base_handler(tree: ast.Module, entry: str) -> bool:
    """True when ``entry`` inherits ``initialize`` from a ts.torch_handler class (through classes of ``tree``), or
    its own ``initialize`` calls that one first (``super().initialize(context)``, as TorchServe's examples do)."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    ts_names, node, seen = _imported_from_ts(tree), classes.get(entry), set()
    if node is None and entry in ts_names:  # a default handler by name: TorchServe's class itself
        return True
    while node is not None and node.name not in seen and _inherits_initialize(node):
        if _has_ts_base(node, ts_names):
            return True
        seen.add(node.name)
        node = next((classes[b] for b in map(ast.unparse, node.bases) if b in classes), None)
    return False


def _inherits_initialize(node: ast.ClassDef) -> bool:
    """True when the class has no ``initialize`` of its own, or its ``initialize`` calls its base's."""
    own = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "initialize"), None)
    if own is None:
        return True
    calls = [c.func for c in ast.walk(own) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]
    return any(
        f.attr == "initialize" and isinstance(f.value, ast.Call) and ast.unparse(f.value.func) == "super" for f in calls
    )


def _not_torchscript(checkpoint: Any) -> str | None:
    """How a checkpoint that is not TorchScript is described ('the state_dict variable'), or None."""
    if type(checkpoint).__module__.startswith("torch.jit"):
        return None
    if isinstance(checkpoint, dict):
        return "the state_dict variable"
    if hasattr(checkpoint, "state_dict"):
        return f"the {type(checkpoint).__name__} module variable (archived as its state_dict)"
    path = Path(checkpoint).expanduser()
    if not path.is_file():
        return None  # archiving reports a missing file
    try:
        with zipfile.ZipFile(path) as zf:  # TorchScript is a zip with the scripted code's constants.pkl
            if any(name.endswith("/constants.pkl") for name in zf.namelist()):
                return None
    except (OSError, zipfile.BadZipFile):
        pass
    return f"{path.name!r}"


def _has_ts_base(node: ast.ClassDef, ts_names: set[str]) -> bool:
    """A base named BaseHandler, imported from ts.torch_handler, or spelled ``ts.torch_handler....``."""
    for base in map(ast.unparse, node.bases):
        if base in ts_names or base.startswith(TS_HANDLER_MODULE + ".") or base.split(".")[-1] == "BaseHandler":
            return True
    return False


def _imported_from_ts(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(TS_HANDLER_MODULE):
            names |= {a.asname or a.name for a in node.names}
    return names


def _methods(node: ast.ClassDef) -> set[str]:
    return {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


# ---------------------------------------------------------------- eager mode
# Eager mode for a BaseHandler that keeps BaseHandler.initialize: the notebook's model class becomes the archive's
# model file (the manifest's ``modelFile``, as ``torch-model-archiver --model-file`` makes it) and the checkpoint its
# state_dict.
#
# BaseHandler.initialize imports the model file, requires exactly one class defined in it
# (``ts.utils.util.list_classes_from_module``), creates it with no arguments and loads the serialized file with
# ``load_state_dict``. The model file written here holds the captured code's imports, functions and constants and the
# one ``nn.Module`` class; the handler classes stay in handler_model.py.

MODULE_BASES = ("Module", "nn.Module", "torch.nn.Module")


def model_classes(tree: ast.Module) -> list[ast.ClassDef]:
    """The top-level ``nn.Module`` subclasses (directly, or through another such class of ``tree``)."""
    found: list[ast.ClassDef] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            if any(b in MODULE_BASES or b in {c.name for c in found} for b in bases):
                found.append(node)
    return found


def model_file_source(source: str, handler_classes: set[str]) -> str:
    """The model file: ``source`` without its handler classes, holding exactly one model class (else refused as
    TorchServe refuses a model file with more than one class)."""
    tree = ast.parse(source)
    models = model_classes(tree)
    others = [
        n.name
        for n in tree.body
        if isinstance(n, ast.ClassDef) and n.name not in handler_classes and n not in models[:1]
    ]
    if len(models) != 1 or others:
        names = ", ".join(f"`{n}`" for n in [*(m.name for m in models), *others]) or "none"
        raise SpecError(
            f"Eager mode needs one model class for the model file ({MODEL_FILE}); the captured code defines {names}. "
            "TorchServe's BaseHandler refuses a model file with more than one class "
            "('Expected only one class as model definition').",
            "keep one nn.Module class (move a building block such as a layer into a local .py module the class "
            "imports: it is bundled), or pass a TorchScript --checkpoint (torch.jit.save(torch.jit.script(model), "
            "'model.pt')) so BaseHandler needs no model file.",
        )
    kept = [n for n in tree.body if not (isinstance(n, ast.ClassDef) and n.name in handler_classes)]
    lines = source.splitlines()
    return "\n\n".join("\n".join(lines[_first(n) - 1 : n.end_lineno]) for n in kept) + "\n"


def _first(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])
