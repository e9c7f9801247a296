"""Files copied into every .mar: the shared handler, the handler_model.py template, default configs.

Installed as the ``msnb.templates`` package so a wheel carries them (see pyproject.toml). This package's
``msnb_*.py`` modules are the shared handler; ``shared_handler_files()`` is the one list of them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHARED_PREFIX = "msnb_"  # every module of the shared handler is named msnb_*.py


def shared_handler_files() -> tuple[Path, ...]:
    """The shared handler modules every archive carries (this package's msnb_*.py), sorted by name."""
    root = resources.files(__name__)
    found = (Path(str(p)) for p in root.iterdir() if p.name.startswith(SHARED_PREFIX) and p.name.endswith(".py"))
    return tuple(sorted(found))
