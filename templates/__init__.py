"""Files copied into every .mar: the shared handler, the handler_model.py template, default configs.

Installed as the ``msnb.templates`` package so a wheel carries them (see pyproject.toml). This package's
``msnb_*.py`` modules are the shared handler; ``shared_handler_files()`` is the one list of them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHARED_PREFIX = "msnb_"  # every module of the shared handler is named msnb_*.py
# Engine adapters (msnb_ray*.py) sit beside the model folders they serve, not inside an archive.
ENGINE_ADAPTER_PREFIX = "msnb_ray"


def shared_handler_files() -> tuple[Path, ...]:
    """The shared handler modules every archive carries (this package's msnb_*.py), sorted by name."""
    root = resources.files(__name__)
    found = (Path(str(p)) for p in root.iterdir() if _is_shared(p.name))
    return tuple(sorted(found))


def _is_shared(name: str) -> bool:
    return name.startswith(SHARED_PREFIX) and name.endswith(".py") and not name.startswith(ENGINE_ADAPTER_PREFIX)
