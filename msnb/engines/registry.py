"""The engines msnb serves on, each declared once by its own package (``ENGINE``, an ``EngineKind``): the session,
the magics, the widget, the CLI and the compare code loop over this registry or hold an ``Engine``; none of them
branches on an engine's name.

A third engine is one folder under ``msnb/engines/`` whose package declares its ``EngineKind``, and one line here (or
one ``register`` call, as the tests' stand-in engine does).
"""

from __future__ import annotations

from msnb.engines import ray, torchserve
from msnb.engines.protocol import EngineKind
from msnb.errors import SpecError

_KINDS: dict[str, EngineKind] = {}


def register(kind: EngineKind) -> EngineKind:
    """Make ``kind`` an engine every surface offers (its ``kind`` replaces one registered before under that name)."""
    _KINDS[kind.kind] = kind
    return kind


def unregister(kind: str) -> None:
    """Take the engine ``kind`` off the registry (the engines msnb ships stay)."""
    if kind not in (torchserve.ENGINE.kind, ray.ENGINE.kind):
        _KINDS.pop(kind, None)


def kinds() -> tuple[str, ...]:
    """Every engine's name, the reference (TorchServe, the truth every other engine is compared with) first."""
    return tuple(_KINDS)


def reference() -> EngineKind:
    """The engine whose answers are the truth: TorchServe."""
    return _KINDS[torchserve.ENGINE.kind]


def ray_serve() -> EngineKind:
    """The Ray Serve engine, for the surfaces that are Ray's own (`msnb export --ray`, `msnb ray`, `%ms_ray`)."""
    return _KINDS[ray.ENGINE.kind]


def get(kind: str) -> EngineKind:
    """The engine named ``kind``; a SpecError naming the engines there are when there is none."""
    try:
        return _KINDS[kind]
    except KeyError:
        raise SpecError(f"Unknown engine {kind!r}.", f"use one of {', '.join(_KINDS)}.") from None


def counterpart(kind: str) -> EngineKind:
    """The engine ``kind``'s answers are compared with: the reference, or for the reference the first other engine."""
    if kind != reference().kind:
        return reference()
    return next(k for k in _KINDS.values() if k.kind != kind)


register(torchserve.ENGINE)
register(ray.ENGINE)

__all__ = ["EngineKind", "counterpart", "get", "kinds", "reference", "register", "unregister"]
