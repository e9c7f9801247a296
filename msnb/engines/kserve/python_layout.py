"""``msnb export A.mar B.mar --kserve-python OUT``: archives torch-model-archiver made, as a folder KServe's own Python
model server serves (no TorchServe frontend, no Java): each archive opened as ``msnb serve`` opens it into
OUT/<name>/, ``kserve_predictor.py`` (with the runtime package, ``msnb_runtime/``; one ``kserve.Model`` per folder, loaded by TorchServe's ``TsModelLoader``,
answering KServe's v1 and v2 protocols) and ``requirements.txt`` (the server's packages, then the archives' own).

From OUT: ``pip install -r requirements.txt && python kserve_predictor.py`` (KServe's ModelServer arguments, e.g.
``--http_port 8080``); the same folder is a custom predictor's image or storageUri on KServe.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from msnb.files import written_into
from msnb.templates import KSERVE_ENTRY, KSERVE_ROOMS, copy_runtime, entry_file
from msnb.templates.msnb_runtime.handler.names import REQUIREMENTS

PREDICTOR = KSERVE_ENTRY
KSERVE = "kserve==0.21.0"  # the KServe release the predictor is tested with (its own environment: tests/cli)
SERVER_PACKAGES = ("torch", "torchserve")  # pinned to this environment's versions: the archives were checked here


def write_kserve_python(outdir: Path, stage: Callable[[Path], list[str]]) -> Path:
    """OUT/<name>/ per archive (``stage(staging)`` opens them there and returns their own requirement lines), the
    predictor and requirements.txt; built in a hidden folder inside OUT and moved into place only when everything was
    written. A refused archive is a ServerError with a Hint (nothing written)."""
    with written_into(outdir, ".msnb-kserve-python-") as staging:
        wanted = stage(staging)
        shutil.copy2(entry_file(PREDICTOR), staging / PREDICTOR)  # the predictor, and the runtime it imports
        copy_runtime(staging, KSERVE_ROOMS)
        (staging / REQUIREMENTS).write_text(requirements(wanted))
    return outdir


def requirements(archives: list[str]) -> str:
    """The predictor's environment: KServe, this environment's torch and TorchServe, then the archives' lines."""
    pins = [KSERVE] + [f"{name}=={metadata.version(name).split('+')[0]}" for name in SERVER_PACKAGES]
    own = [line for line in dict.fromkeys(archives) if line not in pins]
    header = f"# Written by `msnb export --kserve-python`: pip install -r {REQUIREMENTS}, then python {PREDICTOR}\n"
    return header + "".join(f"{line}\n" for line in pins + own)
