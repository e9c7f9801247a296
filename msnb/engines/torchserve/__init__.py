"""TorchServe from Python: its process (LocalServer), its REST APIs (TorchServeClient), its files and logs.

Imports nothing from msnb's notebook or packaging side: it serves any TorchServe archive. Names load on
first use.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msnb.engines.protocol import Engine, EngineKind, ServeOptions
from msnb.errors import OptionError

if TYPE_CHECKING:
    from msnb.engines.inference_api import InferenceClient

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


def _connect(url: str, key_file: Path | None = None, management_url: str | None = None) -> InferenceClient:
    """A client of a running TorchServe's APIs at ``url``: the key in ``key_file`` (None: none sent), renewed on
    ``management_url`` when given (a server msnb did not start: used as given, never renewed)."""
    from msnb.engines.auth import Keys
    from msnb.engines.torchserve.client import TorchServeClient

    keys = Keys(Path(key_file) if key_file else None, management_url, enabled=key_file is not None)
    return TorchServeClient(url, management_url, keys=keys)


ENGINE = EngineKind(
    "torchserve",
    "TorchServe",
    "starting TorchServe (Java)",
    _default,
    _running,
    lambda: None,
    "msnb.engines.torchserve.server.LocalServer",
    command=_command,
    connect=_connect,
)

__all__ = sorted([*_LAZY, "ENGINE"])
