"""What a role returned that the next step cannot take, said as that role's doing (the shared handler).

``preprocess`` hands the model its input: a tensor, or dicts, tuples and lists of tensors (``handler.collate``).
When the forward fails on an input that holds no tensor at all (a list of floats, a dict of lists, ``None`` from a
missing ``return``), the failure is preprocess's, not the model's: the answer names preprocess and the type it
returned. ``postprocess`` hands the client its answer: when the answer cannot be JSON, the message names the role,
the type it returned and where the value JSON cannot carry sits.

Depends only on the standard library and torch, never on msnb.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .collate import has_tensor

PREPROCESS_HINT = (
    "return a tensor from preprocess, e.g. torch.tensor(sample['x'], dtype=torch.float32) (or a dict, tuple or list "
    "of tensors: they are batched too); a model that takes plain values needs an inference(model, batch) role."
)
_LISTED = 3  # keys named when a dict is described


class ReturnError(TypeError):
    """A role returned what the next step cannot take; the message names the role and the type."""


def preprocess_fault(model_input: Any, err: BaseException, own: bool = True) -> ReturnError | None:
    """The forward's failure ``err`` as preprocess's doing, when ``model_input`` holds no tensor; else None.
    ``own``: the cell defines preprocess (else the request body went to the model as it came)."""
    if has_tensor(model_input):
        return None
    what = "preprocess returned" if own else "there is no preprocess role, and the request body is"
    return ReturnError(
        f"{what} {described(model_input)}, not a tensor, and the model cannot take it "
        f"({type(err).__name__}: {str(err)[:300]})"
    )


def unencodable(result: Any, role: str) -> ReturnError | None:
    """Why ``result`` (what ``role`` returned) cannot be JSON: its type and where the value JSON cannot carry sits."""
    path, value = _first_unencodable(result, "")
    if value is _FINE:
        return None
    where = f", holding {described(value)} at {path}," if path else ""
    return ReturnError(f"{role} returned {described(result)}{where} which JSON cannot carry")


def described(value: Any) -> str:
    """A value's type in words: ``None``, ``a list of 4 floats``, ``a dict with keys 'x', 'y'``, ``a set``."""
    if value is None:
        return "None"
    kind = type(value).__name__
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a {kind} of {len(value)} {kinds[0]}s" if len(kinds) == 1 else f"a {kind} of {len(value)} items"
    if isinstance(value, Mapping):
        keys = ", ".join(repr(k) for k in list(value)[:_LISTED]) + (", ..." if len(value) > _LISTED else "")
        return f"a {kind} with keys {keys}" if value else f"an empty {kind}"
    return f"an {kind}" if kind[:1].lower() in "aeiou" else f"a {kind}"


_FINE = object()


def _first_unencodable(value: Any, path: str) -> tuple[str, Any]:
    """The path (``['tags'][0]``) and value of the first part ``json.dumps`` refuses; ``_FINE`` when none is."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                return f"{path}[{key!r}] (a key)", key
            found = _first_unencodable(item, f"{path}[{key!r}]")
            if found[1] is not _FINE:
                return found
        return path, _FINE
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _first_unencodable(item, f"{path}[{i}]")
            if found[1] is not _FINE:
                return found
        return path, _FINE
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return path, value
    return path, _FINE
