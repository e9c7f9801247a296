"""The checks of an archive torch-model-archiver made (a .mar, a tgz model archive, a no-archive folder), for
``ModelFolder.open``: unpacked safely (``msnb_runtime.handler.unpack``: every member checked before anything is written), then read as
a TorchServe worker would find it: a manifest and the files it names (handler, modelFile, serializedFile, configFile).
"""

from __future__ import annotations

import importlib.util
import json
import os
import tarfile
from pathlib import Path

from msnb.errors import ServerError
from msnb.files import clone_tree
from msnb.templates.msnb_runtime.handler.names import MANIFEST
from msnb.templates.msnb_runtime.handler.unpack import UnsafeArchiveError, unpack_archive

ARCHIVE_HINT = (
    "pass a .mar built by torch-model-archiver (zip or tgz) or a no-archive folder with MAR-INF/MANIFEST.json."
)


def unpacked(path: Path, staging: Path) -> Path:
    """The model folder's root inside ``staging``: a folder copied, an archive unpacked (a tgz holds NAME/...)."""
    if path.is_dir():
        _refuse_links_out(path)
        clone_tree(path, staging / "model")
        return staging / "model"
    try:
        unpack_archive(path, staging / "model")
    except UnsafeArchiveError as err:  # its message names the archive's file: said once, with its path
        why = err.message.removeprefix(f"{path.name} ")
        raise ServerError(f"{path} is refused, nothing unpacked: it {why}", err.hint) from None
    except Exception as err:  # zipfile.BadZipFile, tarfile.ReadError, EOFError, zlib.error: truncated or corrupt
        raise ServerError(
            f"{path} is not a readable model archive ({_unreadable(err)}).",
            f"the file is truncated or corrupt: copy or build it again; {ARCHIVE_HINT}",
        ) from None
    root = staging / "model"
    inner = [p for p in root.iterdir() if (p / MANIFEST).is_file()] if not (root / MANIFEST).is_file() else []
    return inner[0] if len(inner) == 1 else root


def _unreadable(err: Exception) -> str:
    """Why an archive could not be read, in one line (tarfile lists each compression it tried: not those)."""
    if isinstance(err, tarfile.ReadError):
        return "neither a zip, as torch-model-archiver writes a .mar, nor a tar archive"
    return f"{type(err).__name__}: {err}"


def _refuse_links_out(folder: Path) -> None:
    top = folder.resolve()
    for dirpath, dirnames, filenames in os.walk(folder):
        for entry in (*dirnames, *filenames):
            link = Path(dirpath) / entry
            if link.is_symlink() and not link.resolve().is_relative_to(top):
                raise ServerError(
                    f"{folder}: {link} is a link pointing out of the model folder ({os.readlink(link)}).",
                    "put the file itself in the folder instead of a link to it.",
                )


def manifest(path: Path, root: Path) -> dict:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
        if not isinstance(manifest.get("model"), dict) or not manifest["model"].get("modelName"):
            raise KeyError("model.modelName")
        return manifest
    except (OSError, ValueError, KeyError) as err:
        raise ServerError(
            f"{path} is not a TorchServe model archive: no readable {MANIFEST} ({type(err).__name__}: {err}).",
            ARCHIVE_HINT,
        ) from None


def check_files(path: Path, root: Path, model: dict) -> None:
    """Every file the manifest names is in the archive; a handler not there must be a default handler's name."""
    handler = str(model.get("handler") or "")
    module = handler.partition(":")[0]
    named = [model.get(key) for key in ("modelFile", "serializedFile", "configFile", "requirementsFile")]
    if module.endswith(".py") or (root / f"{module}.py").is_file() or not _default_handler(module):
        named.append(module if module.endswith(".py") else f"{module}.py")
    for name in filter(None, named):
        if not (root / Path(name).name).is_file() and not (root / name).is_file():
            raise ServerError(
                f"{path}: its manifest names {name!r}, which is not in the archive.",
                "build the archive again with that file (torch-model-archiver --handler / --model-file / "
                "--serialized-file / --extra-files), or name a default handler such as text_classifier.",
            )


def _default_handler(name: str) -> bool:
    """Whether ``name`` is one of TorchServe's default handlers (``ts.torch_handler.<name>``)."""
    try:
        return bool(name) and importlib.util.find_spec(f"ts.torch_handler.{name}") is not None
    except (ImportError, ValueError):
        return False
