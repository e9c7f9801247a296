"""msnb: notebook cells become TorchServe model archives, served and tested from the notebook."""

from __future__ import annotations

import importlib
from typing import Any

from msnb.errors import MsnbError
from msnb.spec import HandlerSpec, SourceBlock

__version__ = "0.1.0"

# Heavier parts (torch, TorchServe, ipywidgets) load on first use: `%load_ext msnb` stays fast.
_LAZY = {
    "LocalServer": "msnb.server",
    "BuildWidget": "msnb.widget",
    "capture": "msnb.capture",
    "Session": "msnb.session",
}


def test_handler(name_or_spec: str | HandlerSpec, samples: list | None = None) -> list:
    """Run a handler in-process (no server) on ``samples``; returns one answer per sample."""
    from msnb.session import current

    return current().test(name_or_spec, samples)


test_handler.__test__ = False  # not a pytest test


def build(name_or_spec: str | HandlerSpec, export_path: str = "model_store", *, dev: bool = False):
    """Build the handler's .mar into ``export_path``; returns its path."""
    from msnb.session import current

    return current().build(name_or_spec, export_path, dev=dev)


def serve(name_or_spec: str | HandlerSpec):
    """Serve the handler on the notebook's local TorchServe; returns the server (``.predict``, ``.stop``)."""
    from msnb.session import current

    return current().serve(name_or_spec)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext msnb`: register the magics."""
    from msnb.magics import load_ipython_extension as _load

    _load(ipython)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'msnb' has no attribute {name!r}")


__all__ = ["BuildWidget", "HandlerSpec", "LocalServer", "MsnbError", "SourceBlock", "build", "capture",
           "serve", "test_handler", "__version__"]
