"""The roles a handler cell may define (init_function, preprocess, ...): their table, and the checks capture runs.

A role is found by name in the cell's top-level functions and checked against how the shared handler calls it.
"""

from __future__ import annotations

import ast
import difflib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from msnb.errors import SpecError
from msnb.forms import ROLES_FORM, Form, detect

# Role name -> (keyword the shared handler's factory takes, positional arity it calls with).
# Arity None means "callable with **kwargs" (init_function(**init_kwargs)).
ROLES: dict[str, tuple[str, int | None]] = {
    "init_function": ("init_function", None),
    "preprocess": ("preprocess_function", 1),
    "postprocess": ("postprocess_function", 1),
    "install_packages": ("install_packages", 0),
    "unpack_dependencies": ("unpack_dependencies", 0),
    "explain": ("explain_function", 2),
    "inference": ("inference_function", 2),
}
# Aliases a user may write instead of the role name (the model-servers helper spelling).
ROLE_ALIASES = {
    "preprocess_function": "preprocess",
    "postprocess_function": "postprocess",
    "explain_function": "explain",
}
# Names people write for a role that difflib does not find close enough (other frameworks' spellings).
TYPOS = {
    "init_fn": "init_function",
    "init_func": "init_function",
    "init": "init_function",
    "init_model": "init_function",
    "model_fn": "init_function",
    "input_fn": "preprocess",
    "preprocess_fn": "preprocess",
    "output_fn": "postprocess",
    "postprocess_fn": "postprocess",
    "forward": "inference",
    "predict": "inference",
    "infer": "inference",
}
SIGNATURES = {
    "init_function": "def init_function(**kwargs) -> torch.nn.Module",
    "preprocess": "def preprocess(sample)",
    "postprocess": "def postprocess(output)",
    "install_packages": "def install_packages()",
    "unpack_dependencies": "def unpack_dependencies()",
    "explain": "def explain(model, model_input) (or explain(model, model_input, target=None))",
    "inference": "def inference(model, batch) (a plain function or a generator; default: model(batch))",
}


STREAMING_ROLES = (
    "inference",
    "postprocess",
)  # a generator here streams the answer (templates/msnb_runtime/handler/stream.py)


def streaming_roles(tree: ast.Module, roles: Mapping[str, str]) -> tuple[str, ...]:
    """The roles whose (last) definition in ``tree`` is a generator function: their answers stream."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    return tuple(r for r in STREAMING_ROLES if r in roles and roles[r] in defs and _yields(defs[roles[r]]))


def _yields(fn: ast.FunctionDef) -> bool:
    """Whether ``fn`` itself yields (a yield inside a nested function or class is not its own)."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def find_roles(tree: ast.Module) -> dict[str, str]:
    """Map each role to the top-level function implementing it (aliases accepted)."""
    roles: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            role = ROLE_ALIASES.get(node.name, node.name)
            if role in ROLES:
                roles[role] = node.name
    return roles


def check_arity(role: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """Refuse a role whose signature the shared handler cannot call."""
    _, arity = ROLES[role]
    args = fn.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults)
    required_kwonly = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    ok = not required_kwonly or arity is None
    if arity is None:  # init_function(**init_kwargs): parameters without defaults are checked against them
        ok = ok and not any(a in args.posonlyargs for a in positional[:required])
    else:
        ok = ok and required <= arity and (len(positional) >= arity or args.vararg is not None)
    if isinstance(fn, ast.AsyncFunctionDef):
        ok = False
    if not ok:
        raise SpecError(
            f"`{fn.name}` (role {role}) has the wrong signature (line {fn.lineno}).",
            f"the shared handler calls it as `{SIGNATURES[role]}`"
            + (" (values come from --init-kwargs by keyword: no positional-only parameters)" if arity is None else ""),
        )


def check_init_kwargs(tree: ast.Module, name: str, init_kwargs: Mapping[str, Any]) -> None:
    """Every init_function parameter without a default must be supplied by init_kwargs (its last definition)."""
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        return
    args = defs[-1].args
    positional = args.posonlyargs + args.args
    required = [a.arg for a in positional[: len(positional) - len(args.defaults)]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    missing = [p for p in required if p not in init_kwargs]
    if missing:
        listed = ", ".join(f"`{p}`" for p in missing)
        example = json.dumps({p: "..." for p in missing})
        raise SpecError(
            f"`{name}` needs {listed} but --init-kwargs does not supply {'it' if len(missing) == 1 else 'them'}.",
            f"pass --init-kwargs '{example}' (or the widget's init kwargs), or give the parameter a default.",
        )


def check_roles(tree: ast.Module) -> dict[str, str]:
    """The roles a module implements (see find_roles), each checked against how the shared handler calls it."""
    roles = find_roles(tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            role = ROLE_ALIASES.get(node.name, node.name)
            if roles.get(role) == node.name:
                check_arity(role, node)
    return roles


def form_and_roles(
    tree: ast.Module, known: Collection[str] = (), entry: str | None = None
) -> tuple[Form, dict[str, str]]:
    """The cell's form (see msnb.forms; ``known``: handler classes of other cells; ``entry``: the --handler the
    user named) and its checked roles."""
    form = detect(tree, find_roles(tree), known, entry)
    return form, check_roles(tree) if form.kind == ROLES_FORM else {}


def did_you_mean(name: str) -> str | None:
    """The role ``name`` is probably a misspelling of (``postprocesss``, ``pre_process``, ``init_fn``), or None."""
    if name in ROLES or name in ROLE_ALIASES:
        return None
    if name in TYPOS:
        return TYPOS[name]
    close = difflib.get_close_matches(name.lower(), ROLES, n=1, cutoff=0.8)
    return close[0] if close else None


# What the handler does instead of a role the cell lacks, said beside an answer a misspelt role changed.
WITHOUT = {
    "preprocess": "the model was given each request's body as it came",
    "postprocess": "this is the model's raw output",
    "inference": "the model's own forward ran (model(batch))",
    "explain": "explanations are Captum's Integrated Gradients of the model",
}


@dataclass(frozen=True)
class NearMiss:
    """A top-level function nothing calls whose name is close to a role the cell lacks: most likely a misspelt role."""

    name: str  # what the cell defines (``postprocesss``)
    role: str  # the role it is close to (``postprocess``)
    line: int  # its line in the cell, as the notebook numbers it

    @property
    def hint(self) -> str:
        return f"rename `{self.name}` to `{self.role}`."

    def warning(self) -> str:
        """What capture says."""
        return (
            f"line {self.line}: `{self.name}` is not a role and nothing calls it: did you mean `{self.role}`? "
            f"(as written, the handler runs without a {self.role}) Hint: {self.hint}"
        )

    def beside_answer(self) -> str:
        """What ``%ms_test`` and ``%ms_serve`` say beside their answer."""
        without = WITHOUT.get(self.role, f"the handler ran without a {self.role}")
        return f"no {self.role} role (`{self.name}` on line {self.line} is none): {without}. Hint: {self.hint}"


def near_misses(tree: ast.Module, form: str, roles: Mapping[str, str], line: Any = None) -> tuple[NearMiss, ...]:
    """Each top-level function of ``tree`` that nothing calls and whose name is close to a role the cell lacks;
    ``line`` maps a line of ``tree`` to the cell's (default: the same)."""
    if form != ROLES_FORM:
        return ()
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in used:
            role = did_you_mean(node.name)
            if role is not None and role not in roles:
                found.append(NearMiss(node.name, role, line(node.lineno) if line else node.lineno))
    return tuple(found)
