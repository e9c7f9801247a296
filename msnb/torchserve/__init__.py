"""TorchServe from Python: its process (LocalServer), its REST APIs (TorchServeClient), its files and logs.

Imports nothing from msnb's notebook or packaging side: it serves any TorchServe archive. Names load on
first use, so `python -m msnb.torchserve.watchdog` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "LocalServer": "msnb.torchserve.server",
    "default_server": "msnb.torchserve.server",
    "TorchServeClient": "msnb.torchserve.client",
    "ModelStatus": "msnb.torchserve.models",
    "PredictionError": "msnb.torchserve.models",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'msnb.torchserve' has no attribute {name!r}")


__all__ = sorted(_LAZY)
