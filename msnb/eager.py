"""Eager mode for a BaseHandler that keeps BaseHandler.initialize: the notebook's model class becomes the archive's
model file (the manifest's ``modelFile``, as ``torch-model-archiver --model-file`` makes it) and the checkpoint its
state_dict.

BaseHandler.initialize imports the model file, requires exactly one class defined in it
(``ts.utils.util.list_classes_from_module``), creates it with no arguments and loads the serialized file with
``load_state_dict``. The model file written here holds the captured code's imports, functions and constants and the
one ``nn.Module`` class; the handler classes stay in handler_model.py.
"""

from __future__ import annotations

import ast

from msnb.errors import SpecError

MODEL_FILE = "model_file.py"  # the manifest's modelFile (BaseHandler imports it by this name)
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
