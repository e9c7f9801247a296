"""The stand-in engine's declaration: what the registry needs to offer it on every surface (``ENGINE``)."""

from __future__ import annotations

from msnb.engines.protocol import EngineKind

_engine = None


def _default(port: int | None = None):
    global _engine
    from standin.engine import StandIn

    if _engine is None:
        _engine = StandIn()
    return _engine


def _running() -> bool:
    return _engine is not None and _engine.running


ENGINE = EngineKind(
    "standin",
    "the stand-in engine",
    "starting the stand-in engine",
    _default,
    _running,
    lambda: None,
    "standin.engine.StandIn",
)
