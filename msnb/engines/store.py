"""A model store (TorchServe's, and the Ray engine's alike): archives and model folders copied in under a per-version
name, read back by their manifest."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from msnb.errors import ServerError
from msnb.files import clone_file, clone_tree, disk_error, partial_sibling, remove, replace_tree
from msnb.templates.msnb_runtime.handler.names import MANIFEST, SEGMENT_RULE, valid_segment

STORE_DIR = "model_store"  # an engine's model store, inside its workdir


def check_identity(name: str, version: str) -> None:
    """Refuse a model name or version that TorchServe would register but could not serve or remove."""
    for what, value in (("name", name), ("version", version)):
        if not valid_segment(value):
            raise ServerError(
                f"Model {what} {value!r} is not valid.",
                f"a model {what} uses {SEGMENT_RULE} (e.g. 'mnist' 1.0): rebuild the archive with one.",
            )


def read_manifest(path: Path) -> tuple[str, str]:
    """(modelName, modelVersion) of a .mar file or a no-archive model directory."""
    try:
        if path.is_dir():
            manifest = json.loads((path / MANIFEST).read_text())
        else:
            with zipfile.ZipFile(path) as zf:
                manifest = json.loads(zf.read(MANIFEST))
        model = manifest["model"]
        return model["modelName"], str(model.get("modelVersion", "1.0"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        raise ServerError(
            f"{path} is not a TorchServe model archive ({err.__class__.__name__}: {err}).",
            "pass a .mar built by torch-model-archiver or msnb.build(), or a no-archive model "
            "folder with MAR-INF/MANIFEST.json.",
        ) from None


def next_version(version: str, taken: set[str]) -> str:
    """``version`` when nothing of it is taken, else ``version-rN`` one above the highest revision taken
    (``1.0`` -> ``1.0-r2`` -> ``1.0-r3``, even after ``1.0`` itself was unregistered)."""
    revision = re.compile(re.escape(version) + r"-r(\d+)")
    numbers = [1 if v == version else int(m.group(1)) for v in taken if v == version or (m := revision.fullmatch(v))]
    return f"{version}-r{max(numbers) + 1}" if numbers else version


def safe_name(name: str, version: str) -> str:
    """The file name of one model version, ``NAME-VERSION`` (a store entry, an archive kept aside) that
    TorchServe can take as a url."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}-{version}")


class ModelStore:
    """The folder a TorchServe registers archives from."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def place(self, src: Path, name: str, version: str) -> str:
        """Copy (clone) the archive of ``name`` ``version`` into the store; returns the url to register it by.

        A private copy: rebuilding or editing the archive where it was built changes nothing that is served.
        """
        src = Path(src).resolve()
        if src.parent == self.root.resolve():
            return src.name
        target = self.root / (f"{safe_name(name, version)}.mar" if src.is_file() else safe_name(name, version))
        try:
            with partial_sibling(target) as partial:
                staged = partial / target.name
                if src.is_dir():
                    clone_tree(src, staged)
                else:
                    clone_file(src, staged)
                replace_tree(staged, target)
        except OSError as err:
            raise disk_error(target, err, ServerError) from None
        return target.name

    def remove(self, url: str) -> None:
        """Delete an entry this store holds (a url naming anything else is left alone)."""
        if url and "/" not in url:
            remove(self.root / url)
