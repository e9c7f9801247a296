"""Files copied into every .mar: the shared handler, the handler_model.py template, default configs.

Installed as the ``msnb.templates`` package so a wheel carries them (see pyproject.toml).
"""

from importlib import resources
from pathlib import Path

SHARED_PREFIX = "msnb_"  # the shared handler's modules: every archive carries each templates/msnb_*.py


def shared_handler_files() -> list[Path]:
    """The shared handler modules every archive carries (templates/msnb_*.py): the one list of them."""
    root = resources.files(__name__)
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.startswith(SHARED_PREFIX) and p.name.endswith(".py"))
