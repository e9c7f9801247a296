"""The runtime shipped in every archive: what a TorchServe worker (or a Ray Serve replica) runs beside the user's code.

Not templates in the Jinja sense: real, importable, tested Python, copied as files into each model folder and
``.mar`` — the shared batching/device handler (``msnb_*.py``), the ``handler_model.py`` templates
(``*.py.tmpl``), the local server's dev entry (``dev_reload.py``) and the Ray Serve adapter (``msnb_ray*.py``,
copied beside exported model folders). It lives at the top of the source tree (``templates/``) and is installed
as the ``msnb.templates`` package (pyproject.toml's ``package-dir``), so a wheel carries it. Inside a model folder
the modules import each other by their bare names (``from msnb_collate import ...``), never msnb: a plain
TorchServe has no msnb. ``shared_handler_files()`` is the one list of the modules every archive carries.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHARED_PREFIX = "msnb_"  # every module of the shared handler is named msnb_*.py
# Engine adapters (msnb_ray*.py) and the protocols they answer (msnb_api*.py: OpenAI, MCP) sit beside the model folders
# they serve, not inside an archive.
ENGINE_ADAPTER_PREFIX = ("msnb_ray", "msnb_api")


def shared_handler_files() -> tuple[Path, ...]:
    """The shared handler modules every archive carries (this package's msnb_*.py), sorted by name."""
    root = resources.files(__name__)
    found = (Path(str(p)) for p in root.iterdir() if _is_shared(p.name))
    return tuple(sorted(found))


def _is_shared(name: str) -> bool:
    return name.startswith(SHARED_PREFIX) and name.endswith(".py") and not name.startswith(ENGINE_ADAPTER_PREFIX)
