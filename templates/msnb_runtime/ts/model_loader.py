"""Loading a model folder as a TorchServe worker loads it, where no TorchServe worker runs (a Ray Serve replica, any
engine that is not TorchServe): its manifest and model-config, the folder as cwd and import path, and the handler
resolved and initialized by TorchServe's own loader.

Depends on pyyaml and the standard library (and ``ts`` when installed), never on msnb.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from ..handler.names import CONFIG, MANIFEST, REQUIREMENTS
from ..handler.serving import ServingConfig
from .context import make_context


def read_folder(folder: Path) -> tuple[dict, dict]:
    """The folder's manifest (MAR-INF/MANIFEST.json) and model-config (the manifest's configFile, as TorchServe
    reads it, else model-config.yaml; empty when absent)."""
    manifest = json.loads((folder / MANIFEST).read_text()) if (folder / MANIFEST).is_file() else {}
    path = folder / ((manifest.get("model") or {}).get("configFile") or CONFIG)
    config = yaml.safe_load(path.read_text()) if path.is_file() else None
    return manifest, config or {}


def enter(folder: Path) -> Path:
    """Make ``folder`` this process's cwd and first import path, as a TorchServe worker does."""
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    return folder


def requirements_of(folder: Path) -> list[str]:
    """The lines of the folder's requirements file (the manifest's requirementsFile, else requirements.txt;
    PEP 508 requirements; comments and blank lines dropped)."""
    named = (read_folder(folder)[0].get("model") or {}).get("requirementsFile")
    path = folder / Path(named or REQUIREMENTS).name
    lines = path.read_text().splitlines() if path.is_file() else []
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def sends_intermediate(module: str) -> bool:
    """Whether the handler module's text calls ``send_intermediate_predict_response`` (TorchServe's streaming)."""
    try:
        return "send_intermediate_predict_response" in Path(sys.modules[module].__file__).read_text()
    except (KeyError, OSError, TypeError):
        return False


def load_handler(
    folder: Path, name: str, handler: str, config: dict, gpu_id: int | None, metrics: Any, envelope: str | None = None
) -> tuple[Any, Any]:
    """(entry point, context), initialized, as a TorchServe worker loads them: with TorchServe's own loader when
    ``ts`` is installed (``module.py[:function]``, the one class with ``handle``, a default handler by name such as
    ``text_classifier``, an envelope), else a module-level function and msnb_runtime.ts.context's Context."""
    batch_size = ServingConfig.from_model_config(config).batch_size or 1
    try:
        from ts.model_loader import TsModelLoader
    except ImportError:
        entry = load_entry(handler)
        context = make_context(name, str(folder), read_folder(folder)[0], config, batch_size, gpu_id, metrics)
        entry(None, context)
        return entry, context
    module = Path(handler.partition(":")[0]).stem
    if (folder / f"{module}.py").is_file():  # the archive's own module: its ImportError is its own (TorchServe's
        importlib.import_module(module)  # loader would hide it behind "no default handler named ...")
    service = TsModelLoader().load(name, str(folder), handler, gpu_id, batch_size, envelope, True, metrics)
    if not service.context.model_yaml_config:  # an msnb folder predating configFile in its manifest
        service.context.model_yaml_config = config
    return service._entry_point, service.context


def load_entry(handler: str) -> Any:
    """The manifest's handler as TorchServe resolves it: ``module.py[:function]``, the function ``handle``."""
    module_name, _, function = handler.partition(":")
    module = importlib.import_module(Path(module_name).stem)
    entry = getattr(module, function or "handle", None)
    if entry is None:
        raise RuntimeError(f"{handler}: no module-level {function or 'handle'} function to call.")
    return entry
