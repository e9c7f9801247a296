"""The files msnb copies into every model folder and export: the runtime package and the entry files beside it.

Not templates in the Jinja sense: real, importable, tested Python. It lives at the top of the source tree
(``templates/``) and is installed as the ``msnb.templates`` package (pyproject.toml's ``package-dir``), so a wheel
carries it. It holds:

- ``msnb_runtime/`` — the runtime package, one room per part (see its docstring). msnb imports it as
  ``msnb.templates.msnb_runtime``; every model folder, ``.mar``, KServe folder and Ray export carries a copy of the
  rooms it needs, imported there as the top-level ``msnb_runtime`` (a plain TorchServe has no msnb);
- ``handler_model.py.tmpl`` / ``handler_model_own.py.tmpl`` — the rendered handler's templates;
- ``dev_reload.py`` (the local server's dev entry) and ``kserve_predictor.py`` (KServe's Python server): the entry
  files a server runs from a folder's top, each importing the runtime package as a model folder does.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from .msnb_runtime.dev.reload import DEV_ENTRY

RUNTIME = "msnb_runtime"  # the runtime package's name in every model folder and export
ARCHIVE_ROOMS = ("handler",)  # what every model folder and .mar carries: the shared batching/device handler
# What sits beside exported Ray model folders: the handler (imported by the replicas' model folders from here once
# the package is imported), TorchServe's interfaces, the protocols and the Ray replica and ingress.
RAY_ROOMS = ("handler", "ts", "api", "ray")
KSERVE_ROOMS = ("handler", "kserve")  # beside a KServe Python server's model folders
DEV_ROOMS = ("dev",)  # the local server's dev reload, never in an archive
KSERVE_ENTRY = "kserve_predictor.py"  # KServe's Python server, run from the folder's top
__all__ = [
    "DEV_ENTRY",
    "KSERVE_ENTRY",
    "RUNTIME",
    "copy_runtime",
    "entry_file",
    "runtime_files",
    "shared_handler_files",
]


def runtime_files(rooms: tuple[str, ...]) -> tuple[tuple[Path, str], ...]:
    """(source, path inside a folder) of the runtime package's ``__init__.py`` and the modules of ``rooms``."""
    root = resources.files(__name__) / RUNTIME
    found = [(Path(str(root / "__init__.py")), f"{RUNTIME}/__init__.py")]
    for room in rooms:
        for p in (root / room).iterdir():
            if p.name.endswith(".py"):
                found.append((Path(str(p)), f"{RUNTIME}/{room}/{p.name}"))
    return tuple(sorted(found, key=lambda f: f[1]))


def shared_handler_files() -> tuple[Path, ...]:
    """The shared handler modules every archive carries (the runtime's ``handler`` room), sorted by path."""
    return tuple(src for src, _ in runtime_files(ARCHIVE_ROOMS))


def entry_file(name: str) -> Path:
    """One of the entry files a server runs from a folder's top (``DEV_ENTRY``, ``KSERVE_ENTRY``)."""
    return Path(str(resources.files(__name__) / name))


def copy_runtime(folder: Path, rooms: tuple[str, ...]) -> None:
    """Copy the runtime package's ``rooms`` into ``folder`` (as ``folder/msnb_runtime/ROOM/``)."""
    for src, inside in runtime_files(rooms):
        (folder / inside).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, folder / inside)
