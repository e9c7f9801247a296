"""msnb: notebook cells become TorchServe model archives, served and tested from the notebook."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from msnb.ui import quiet

if TYPE_CHECKING:
    from msnb.spec import HandlerSpec

quiet.install()  # before anything imports TorchServe's base handler (see msnb.ui.quiet)

__version__ = "0.1.0"

# Everything loads on first use: `import msnb` imports neither torch nor IPython, so a process that needs one small
# part (the TorchServe watchdog, `msnb --help`) stays light, and `%load_ext msnb` stays fast.
_LAZY = {
    "MsnbError": "msnb.errors",
    "HandlerSpec": "msnb.spec",
    "SourceBlock": "msnb.spec",
    "LocalServer": "msnb.engines.torchserve",
    "TorchServeClient": "msnb.engines.torchserve",
    "BuildWidget": "msnb.ui.widget",
    "Session": "msnb.session",
}


def test_handler(name_or_spec: str | HandlerSpec, samples: list | None = None, *, explain: bool = False) -> list:
    """Run a handler in its own test process (no server) on ``samples``; returns one answer per sample.

    ``explain=True`` asks for explanations instead (the ``explain`` role, or Captum's Integrated Gradients).
    """
    from msnb.session.core import current

    return current().test(name_or_spec, samples, explain=explain)


test_handler.__test__ = False  # not a pytest test


def build(
    name_or_spec: str | HandlerSpec, export_path: str | None = None, *, fmt: str | None = None, dev: bool = False
):
    """Validate the handler in a test process and build its archive into ``export_path``; returns its path.

    ``fmt`` is one of ``msnb.package.formats.FORMATS`` (default ``mar``); ``dev=True`` means the fast ``zip-store``.
    """
    from msnb.session.core import current

    return current().build(name_or_spec, *([export_path] if export_path else []), fmt=fmt, dev=dev)


def serve(
    name_or_spec: str | HandlerSpec, engine: str | None = None, port: int | None = None, env: list[str] | None = None
):
    """Serve the handler on the notebook's local TorchServe (``engine="ray"``: a local Ray Serve, HTTP on
    ``port``); ``env`` names variables of the kernel's environment its workers get, and no other model's (the key
    a handler reads with ``os.environ``, never in the archive). Returns the server (``.predict``, ``.stop``)."""
    from msnb.session.core import current

    return current().serve(name_or_spec, engine=engine, port=port, env=env or ())


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext msnb`: register the magics."""
    from msnb.ui.magics import load_ipython_extension as _load

    _load(ipython)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'msnb' has no attribute {name!r}")


__all__ = [
    "BuildWidget",
    "HandlerSpec",
    "LocalServer",
    "MsnbError",
    "Session",
    "SourceBlock",
    "TorchServeClient",
    "build",
    "serve",
    "test_handler",
    "__version__",
]
