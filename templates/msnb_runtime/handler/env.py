"""The variables the server gives this model (``%ms_serve NAME --env VAR``), set in its worker before the user's code.

TorchServe starts every worker with the frontend's environment and has no per-model one. msnb's local server therefore
keeps each model's variables in a file of its own, ``$MSNB_ENV_DIR/<model name>.json`` (mode 0600, in the server's
private work dir, outside the model store; removed at stop), and ``handler_model.py`` calls ``load_env`` first: the
variables then reach this model's workers and no other model's. Anywhere else (no ``$MSNB_ENV_DIR``: a plain
TorchServe, KServe, Ray Serve, which sets a deployment's ``runtime_env`` env_vars itself) it does nothing.
Depends only on the standard library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .names import MANIFEST

ENV_DIR_VAR = "MSNB_ENV_DIR"  # set by msnb's local TorchServe for its workers
_LEVELS = 3  # a dev reload's generation folder sits below the model folder that holds the manifest


def load_env(module_file: str) -> list[str]:
    """Set this model's variables in ``os.environ``; returns their names (never their values)."""
    folder = os.environ.get(ENV_DIR_VAR)
    name = model_name(Path(module_file).resolve().parent) if folder else None
    if not name:
        return []
    try:
        values = json.loads((Path(folder) / f"{name}.json").read_text())
    except FileNotFoundError:
        return []
    os.environ.update({str(k): str(v) for k, v in values.items()})
    return sorted(values)


def model_name(model_dir: Path) -> str | None:
    """The model's name from the manifest of ``model_dir`` (or of a folder above it), None without one."""
    for folder in [model_dir, *model_dir.parents][:_LEVELS]:
        manifest = folder / MANIFEST
        if manifest.is_file():
            return json.loads(manifest.read_text()).get("model", {}).get("modelName")
    return None
