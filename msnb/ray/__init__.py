"""Ray Serve as a second engine: the exported Serve layout (``msnb export --ray``) and a kernel-owned local Ray.

Ray is optional (``pip install "msnb[ray]"``): nothing here imports it until it is used, and ``require``
turns its absence into an error that names the extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from msnb.errors import MsnbError

RAY_VERSION = "2.60.0"
INSTALL_HINT = 'install the Ray extra: pip install "msnb[ray]" (ray[serve]==' + RAY_VERSION + ")."


class RayMissingError(MsnbError):
    """Ray Serve is not installed (the optional ``ray`` extra)."""


def require() -> ModuleType:
    """``ray.serve``, imported; a ``RayMissingError`` naming the extra when it is not installed."""
    try:
        return importlib.import_module("ray.serve")
    except ImportError as err:
        raise RayMissingError(f"Ray Serve is not installed ({err}).", INSTALL_HINT) from None
