"""TorchServe from Python: its process (LocalServer), its REST APIs (TorchServeClient), its files and logs.

Imports nothing from msnb's notebook or packaging side: it serves any TorchServe archive. Names load on
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

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


__all__ = sorted(_LAZY)
