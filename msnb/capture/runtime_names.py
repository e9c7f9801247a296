"""Names a handler needs from the kernel: bound at run time, or bound by a literal that is changed later.

Capture records each such name with where it is bound and used; in a kernel the values are snapshotted
(``msnb.capture.kernel_values``), without one (``msnb export`` reading the file) they are refused, all in one error.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from msnb.capture.mutations import Mutation, mutations
from msnb.capture.scope import Stmt
from msnb.errors import CaptureError
from msnb.forms import CLASS_FORM, FUNCTION_FORM, ROLES_FORM

RUNTIME_HINT = (
    "run `msnb export --execute` (it runs the cells that compute them in a fresh kernel and ships the values as "
    "data); or build them inside init_function: weights from --checkpoint, a file shipped with --extra-files read by "
    "its bare name (the working directory is the model dir), e.g. in a `@functools.cache` helper"
)

# Where an own TorchServe handler builds what it needs once (it has no init_function).
LOAD_STEP = {
    CLASS_FORM: "your handler's initialize(self, context)",
    FUNCTION_FORM: "the load call of your handle (data is None once, before the first request)",
}


@dataclass(frozen=True)
class Needed:
    """A name the handler's code uses whose value only the kernel knows."""

    name: str
    used: str  # "line 3 of cell In[5]"
    bound: str  # "bound at runtime by line 2 of cell In[4]" / "a literal ... changed on line 4 of cell In[4]"

    def line(self) -> str:
        return f"`{self.name}` (used on {self.used}) is {self.bound}"


class Changes:
    """The in-place changes of every executed statement: which literal bindings no longer hold their literal."""

    def __init__(self, stmts: Iterable[Stmt]):
        self.by_name: dict[str, list[Mutation]] = {}
        for m in mutations(stmts):
            self.by_name.setdefault(m.name, []).append(m)

    def after(self, stmt: Stmt) -> Mutation | None:
        """The first in-place change, after ``stmt`` ran, of a name that literal ``stmt`` binds."""
        if stmt.kind != "const":
            return None
        later = [m for n in stmt.defines for m in self.by_name.get(n, ()) if m.pos > stmt.pos]
        return min(later, key=lambda m: m.pos, default=None)

    def as_code(self, rebuild: Any) -> Any:
        """``rebuild.as_code`` (msnb.capture.rebuild.Rebuild) told which names a statement binds are changed later."""
        return lambda stmt: rebuild.as_code(stmt, [n for n in stmt.defines if self._changed_after(n, stmt.pos)])

    def _changed_after(self, name: str, pos: tuple[int, int]) -> bool:
        return any(m.pos > pos for m in self.by_name.get(name, ()))

    def runtime(self, stmt: Stmt) -> bool:
        """True for a statement capture may not copy: computed at run time, or a literal changed later."""
        return stmt.kind == "runtime" or self.after(stmt) is not None

    def needed(self, name: str, user: Stmt, stmt: Stmt) -> Needed:
        change = self.after(stmt)
        if change is None:
            how = f"bound at runtime by {stmt.where(name)}"
        else:
            how = f"bound by a literal on {stmt.where(name)} and changed on {change.where()}"
        return Needed(name, user.where(name), how)


def refuse_without_kernel(needed: Mapping[str, Needed], form: str = ROLES_FORM) -> None:
    """Without a kernel there is no value to copy: every such name is refused, in one error of one line per value."""
    if not needed:
        return
    count = f"{len(needed)} values" if len(needed) > 1 else "a value"
    lines = "".join(f"\n  {n.line()}" for n in needed.values())
    raise CaptureError(
        f"The handler uses {count} the kernel computes; the notebook file holds only the code:{lines}",
        hint_for(form, RUNTIME_HINT),
    )


def hint_for(form: str, hint: str) -> str:
    """``hint`` for a handler of ``form``: an own handler builds things in its load step, not in init_function."""
    return hint.replace("init_function", LOAD_STEP[form]) if form in LOAD_STEP else hint


def where_bound(needed: Mapping[str, Needed]) -> dict[str, str]:
    """name -> where it is bound and used, for the snapshot's messages."""
    return {n.name: f"used on {n.used}" for n in needed.values()}


def values_of(
    needed: Mapping[str, Needed],
    namespace: Mapping[str, Any] | None,
    max_mb: int | None,
    form: str = ROLES_FORM,
    defined: Collection[str] = (),
) -> dict:
    """The spec's ``values`` (``needed`` snapshotted from ``namespace``) and ``objects`` (its Hugging Face objects,
    saved: ``msnb.capture.hf_objects``; ``defined``: the classes the captured code defines), each None when there is
    none; refused without a kernel, with a hint that fits the handler's ``form``."""
    if namespace is None:
        refuse_without_kernel(needed, form)
        return {"values": None, "objects": None}
    from msnb.capture.hf_objects import save_objects, split_objects
    from msnb.capture.kernel_values import snapshot

    objects, plain = split_objects(where_bound(needed), namespace)
    try:
        return {
            "values": snapshot(plain, namespace, max_mb),
            "objects": save_objects(objects, namespace, max_mb, defined),
        }
    except CaptureError as err:
        raise CaptureError(err.message, hint_for(form, err.hint)) from None
