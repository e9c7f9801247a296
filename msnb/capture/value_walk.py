"""Walk a runtime value once, within bounds, before anything is serialised: what cannot travel, and its size.

The walk is iterative (no recursion), goes at most ``MAX_DEPTH`` levels deep and over at most ``MAX_ITEMS``
entries, notices a value that contains itself, and adds up sizes as it goes (bytes and str by length, tensors by
``nbytes``, every entry by ``ENTRY_BYTES``), stopping as soon as the sum passes the limit. What it says names
parts by index, plain keys (truncated) and type names only: a user object's ``__repr__`` is never called.
"""

from __future__ import annotations

import reprlib
from collections import OrderedDict
from typing import Any

import torch

SCALARS = (bool, int, float, str, bytes, type(None))
CONTAINERS = (list, tuple, dict, OrderedDict)
_FLAT = frozenset((bool, int, float, type(None)))  # an entry's cost is all they add
MAX_DEPTH = 100  # torch.save pickles recursively: far below the depth where it would fail
MAX_ITEMS = 1_000_000  # entries walked at most: a bigger collection travels as a tensor or a file
ENTRY_BYTES = 4  # the least one entry (a number, a None, a key) takes in values.pt
PATH_SHOWN = 90  # characters of a part's path in a message (the middle of a longer one elided)
TEXT_CHUNK = 1 << 20  # non-ASCII text is measured in chunks of this many characters
_MB = 2**20
_LEAVE = object()  # on the walk's stack: every entry of this container has been walked
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 40, 40, 2
# What each problem's words call for (values.py adds them to its hint).
WAYS = {
    "a cycle": "a value that contains itself cannot travel as data: build it without the back-reference",
    "levels deep": f"data nested more than {MAX_DEPTH} levels cannot travel: flatten it or ship it as a file",
    "entries": f"collections of more than {MAX_ITEMS:,} entries travel as a tensor (torch.tensor(values)) or as a "
    "file shipped with --extra-files",
    "a meta tensor": "a meta tensor has no data: materialise it first (load its weights, or torch.empty_like(t, "
    "device='cpu') and fill it)",
    "a sparse tensor": "a sparse tensor travels dense: t.to_dense()",
}


def check(value: Any, limit: int | None = None) -> str | None:
    """Why ``value`` cannot travel as data (naming the part), or None; over ``limit`` bytes is a problem too."""
    return _Walk(limit).run(value)


def short(obj: Any) -> str:
    """A bounded, safe repr for a message: plain values truncated, anything else by its type name only."""
    if type(obj) in SCALARS or (type(obj) is tuple and all(type(k) in SCALARS for k in obj)):
        return _SHORT.repr(obj)
    return f"<{type_name(obj)} object>"


def type_name(obj: Any) -> str:
    kind = type(obj)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def plain_key(key: Any) -> bool:
    return type(key) in SCALARS or (type(key) is tuple and all(plain_key(k) for k in key))


class _Walk:
    """One walk's counters: bytes counted, entries seen, containers open (on the path) and done."""

    def __init__(self, limit: int | None):
        self.limit, self.size, self.items = limit, 0, 0
        self.open: set[int] = set()
        self.done: set[int] = set()

    def run(self, value: Any) -> str | None:
        stack: list[tuple[Any, Any, int]] = [(value, None, 0)]
        while stack:
            obj, path, depth = stack.pop()
            if path is _LEAVE:
                self.open.discard(obj)
                continue
            problem = self._visit(obj, path, depth, stack)
            if problem:
                return problem
        return None

    def _visit(self, obj: Any, path: Any, depth: int, stack: list) -> str | None:
        kind = type(obj)
        if kind in SCALARS:
            return self._grow(_scalar_size(obj, self._room()), path)
        if isinstance(obj, torch.Tensor):
            return _tensor_problem(obj, path) or self._grow(obj.nbytes, path)
        if isinstance(obj, torch.nn.Module):
            return f"{_holds(path)}an nn.Module ({kind.__name__})"
        if kind not in CONTAINERS:
            return f"{_holds(path)}a {type_name(obj)}"
        if id(obj) in self.open:
            return f"{_holds(path)}the {kind.__name__} that contains it again (a cycle)"
        if id(obj) in self.done:
            return None  # the same object twice: torch.save writes it once
        return self._enter(obj, path, depth, stack)

    def _enter(self, obj: Any, path: Any, depth: int, stack: list) -> str | None:
        if depth >= MAX_DEPTH:
            return f"is nested more than {MAX_DEPTH} levels deep (at {render(path)})"
        self.items += len(obj)
        if self.items > MAX_ITEMS:
            where = f" ({render(path)} has {len(obj):,})" if path is not None else f" ({len(obj):,})"
            return f"holds more than {MAX_ITEMS:,} entries{where}"
        problem = self._grow(ENTRY_BYTES * len(obj), path)
        if problem:
            return problem
        self.open.add(id(obj))
        self.done.add(id(obj))
        stack.append((id(obj), _LEAVE, depth))
        pairs = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for key, item in pairs:
            if type(key) not in _FLAT and not plain_key(key):
                return f"has a key {short(key)} of type {type_name(key)}" + (f" (in {render(path)})" if path else "")
            kind = type(item)
            if kind in _FLAT:
                continue  # counted as an entry
            if kind is str or kind is bytes:  # measured here: a million short texts cost no stack entries
                problem = self._grow(_scalar_size(item, self._room()), (path, key))
                if problem:
                    return problem
                continue
            stack.append((item, (path, key), depth + 1))
        return None

    def _room(self) -> int:
        return (self.limit - self.size) if self.limit is not None else 1 << 62

    def _grow(self, size: int, path: Any) -> str | None:
        self.size += size
        if self.limit is not None and self.size > self.limit:
            at = f" (at {render(path)})" if path is not None else ""
            return f"holds at least {_human(self.size)}, over the {self.limit // _MB} MB limit{at}"
        return None


def _scalar_size(obj: Any, room: int) -> int:
    if type(obj) is bytes:
        return len(obj)
    if type(obj) is not str:
        return ENTRY_BYTES
    if len(obj) > room or obj.isascii():
        return len(obj)  # UTF-8 takes at least a byte a character
    size = 0
    for start in range(0, len(obj), TEXT_CHUNK):  # never a full encoded copy of a big text
        size += len(obj[start : start + TEXT_CHUNK].encode("utf-8", "surrogatepass"))
        if size > room:
            break
    return size


def _tensor_problem(t: torch.Tensor, path: Any) -> str | None:
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return f"{_holds(path)}a {type_name(t)}"
    if t.is_meta:
        return f"{_holds(path)}a meta tensor {list(t.shape)} (it has no data)"
    if t.layout != torch.strided:
        return f"{_holds(path)}a sparse tensor ({str(t.layout).removeprefix('torch.')})"
    return None


def _holds(path: Any) -> str:
    return f"holds {render(path)}, " if path is not None else "is "


def render(path: Any, most: int = PATH_SHOWN) -> str:
    """``[0]['a'][2]`` from the walk's (parent, key) chain; the middle of a long one elided."""
    keys = []
    while path is not None:
        path, key = path
        keys.append(f"[{key}]" if type(key) is int else f"[{short(key)}]")
    text = "".join(reversed(keys))
    return text if len(text) <= most else text[: most // 2] + "..." + text[-most // 2 :]


def _human(size: int) -> str:
    return f"{size / _MB:.1f} MB"
