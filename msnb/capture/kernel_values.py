"""Runtime values: check, snapshot and fingerprint the kernel values a handler uses (shipped as values.pt).

A value travels when ``torch.load(weights_only=True)`` reads it back as it was: tensors, numbers, str,
bytes, bool, None, and lists / tuples / dicts of those. Anything else is refused, all names at once.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from msnb.capture.value_walk import WAYS, check
from msnb.errors import CaptureError
from msnb.options import DEFAULTS, OPTION
from msnb.templates.msnb_runtime.handler.names import VALUES_FILE

_MB = 2**20
# Types people hold such values in, and the plain form that travels.
TYPE_WAYS = {
    "a set": "a set travels as a sorted list (sorted(s))",
    "a numpy.": "a numpy array travels as a tensor (torch.from_numpy(a))",
    "collections.Counter": "a Counter or defaultdict travels as dict(...)",
    "collections.defaultdict": "a Counter or defaultdict travels as dict(...)",
    "a function": "a function travels as code: define it with def in a cell",
}
WAYS_OUT = (
    "turn it into plain data in the notebook (tensors, numbers, str, lists, tuples, dicts), or build it inside "
    "init_function from a file shipped with --extra-files"
)


@dataclass(frozen=True)
class ValueInfo:
    """One snapshotted value as the capture summary lists it."""

    name: str
    kind: str  # e.g. "dict (17 items)", "Tensor float32 [3]"
    size: int  # bytes in values.pt
    digest: str

    def line(self) -> str:
        return f"{self.name}: {self.kind}, {human(self.size)}"


class Snapshot:
    """What each snapshot taken at capture (the values, the saved objects) says of itself: the names it holds (its
    ``items``' names) and a short digest of its bytes (``parts``, hashed in order)."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.items)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in self.parts():
            h.update(part)
        return h.hexdigest()[:12]

    def parts(self) -> Iterator[bytes]:
        raise NotImplementedError


@dataclass(frozen=True)
class Values(Snapshot):
    """The snapshot taken at capture: values.pt's bytes (a frozen copy) and one ValueInfo per name."""

    data: bytes
    items: tuple[ValueInfo, ...]

    def parts(self) -> Iterator[bytes]:
        yield self.data

    def changed(self, namespace: Mapping[str, Any]) -> list[str]:
        """The names whose value in ``namespace`` differs from the snapshot now (or is gone)."""
        return [i.name for i in self.items if i.name not in namespace or _differs(namespace[i.name], i)]


def _differs(value: Any, info: ValueInfo) -> bool:
    """Serialised again only when the walk finds it could still be the same (never a value grown huge)."""
    return check(value, 2 * info.size + _MB) is not None or _digest(_serialise(value)) != info.digest


def values_changed(spec: Any, namespace: Mapping[str, Any] | None) -> str | None:
    """Which snapshotted values of ``spec`` differ in ``namespace`` now (``vocab``, ``mean``), or None."""
    if namespace is None:
        return None
    changed = [
        *(spec.values.changed(namespace) if spec.values else ()),
        *(spec.objects.changed(namespace) if spec.objects else ()),
    ]
    return ", ".join(f"`{n}`" for n in changed) or None


def snapshot(needed: Mapping[str, str], namespace: Mapping[str, Any], max_mb: int | None = None) -> Values | None:
    """Copy the values of ``needed`` (name -> where it is bound) from ``namespace``; None when nothing is needed.

    Every name that cannot travel is reported in one CaptureError.
    """
    if not needed:
        return None
    limit = (max_mb or DEFAULTS["max_value_mb"]) * _MB
    kept, infos, refused = {}, [], []
    for name, where in needed.items():
        if name not in namespace:
            refused.append((name, where, "is not defined in the kernel"))
            continue
        value = namespace[name]
        problem = check(value, limit)
        data = None if problem else _serialise(value)
        if data is not None and len(data) > limit:
            problem = f"is {human(len(data))}, over the {limit // _MB} MB limit"
        if problem:
            refused.append((name, where, problem))
            continue
        kept[name] = _compact(value)
        infos.append(ValueInfo(name, describe(value), len(data), _digest(data)))
    if refused:
        raise _refused(refused, limit // _MB)
    data = _serialise(kept)
    load(data)  # what the server will do: weights_only must read it back
    return Values(data, tuple(infos))


def unsupported(value: Any) -> str | None:
    """Why ``value`` cannot travel as data (naming the part and its type), or None when it can."""
    return check(value)


def _compact(value: Any) -> Any:
    """Tensors detached, on the CPU, without the rest of a larger storage (torch.save writes whole storages)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return t.clone() if t.untyped_storage().nbytes() > t.nbytes else t
    if isinstance(value, (list, tuple)):
        return type(value)(_compact(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _compact(v)) for k, v in value.items())
    return value


def _serialise(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(_compact(value), buffer)
    return buffer.getvalue()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def load(data: bytes) -> dict[str, Any]:
    """Read a snapshot back exactly as the server does (``weights_only=True``)."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def describe(value: Any) -> str:
    """A value's type in a few words: ``Tensor float32 [2, 3]``, ``dict (17 items)``, ``str``."""
    if isinstance(value, torch.Tensor):
        return f"Tensor {str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} ({len(value)} item{'s' if len(value) != 1 else ''})"
    return type(value).__name__


def human(size: float) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _refused(refused: list[tuple[str, str, str]], limit_mb: int) -> CaptureError:
    listed = "; ".join(f"`{name}` ({where}) {problem}" for name, where, problem in refused)
    problems = " ".join(p for _, _, p in refused)
    hints = []
    modules = [(name, problem) for name, _, problem in refused if problem.startswith("is an nn.Module")]
    if modules:
        hints.append(_module_hint(*modules[0]))
    if "limit" in problems:
        hints.append(f"raise the limit with {OPTION['max_value_mb'].flag} (now {limit_mb}) or ship the data as a file")
    if "not defined in the kernel" in problems:
        hints.append("run the cell that binds it first")
    hints += [way for kind, way in {**TYPE_WAYS, **WAYS}.items() if kind in problems]
    hints.append(WAYS_OUT)
    return CaptureError(
        f"These runtime values cannot travel with the handler as data ({VALUES_FILE}): {listed}.",
        "; ".join(dict.fromkeys(hints)) + ".",
    )


def _module_hint(name: str, problem: str) -> str:
    """The two lines that ship a kernel's plain nn.Module: its class in init_function, its weights by --checkpoint."""
    cls = problem.partition("(")[2].rstrip(")")
    return (
        f"a model travels as code and weights, in two lines: `return {cls}(...)` in init_function (its class, with "
        f"the arguments it was built with) and `--checkpoint {name}` on the %%ms_handler line (it saves the kernel "
        "variable's weights)"
    )
