"""TorchServe from Python: its process (LocalServer), its REST APIs (TorchServeClient), its files and logs.

Imports nothing from msnb's notebook or packaging side: it serves any TorchServe archive. Names load on
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from msnb.engines.protocol import Engine, EngineKind, ServeOptions
from msnb.errors import OptionError

_LAZY = {
    "LocalServer": "msnb.engines.torchserve.server",
    "default_server": "msnb.engines.torchserve.server",
    "TorchServeClient": "msnb.engines.torchserve.client",
    "ModelStatus": "msnb.engines.models",
    "PredictionError": "msnb.engines.models",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'msnb.engines.torchserve' has no attribute {name!r}")


def _default(port: int | None = None) -> Engine:
    """The notebook's TorchServe, started (its ports are always free ones: ``port`` is Ray's option)."""
    from msnb.engines.torchserve.server import default_server

    return default_server()


def _running() -> bool:
    from msnb.engines.torchserve.server import default_server

    known = default_server(create=False)  # the notebook's TorchServe starts when first asked for: look, not ask
    return known is not None and known.running


def _command(options: ServeOptions) -> Engine:
    """`msnb serve`'s TorchServe: its body limits, TorchServe's service_envelope (not started)."""
    from msnb.engines.torchserve.server import LocalServer

    if options.models_per_replica is not None or options.own_replica or options.loaded_per_replica is not None:
        raise OptionError(
            "--models-per-replica, --loaded-per-replica and --own-replica place models into Ray Serve's replicas.",
            "add --engine ray, or leave them out: TorchServe gives each model workers of its own.",
        )
    properties = {"service_envelope": options.envelope} if options.envelope else None
    return LocalServer(
        max_request_size=options.max_request_size, max_response_size=options.max_response_size, properties=properties
    )


ENGINE = EngineKind(
    "torchserve",
    "TorchServe",
    "starting TorchServe (Java)",
    _default,
    _running,
    lambda: None,
    "msnb.engines.torchserve.server.LocalServer",
    command=_command,
)

__all__ = sorted([*_LAZY, "ENGINE"])
