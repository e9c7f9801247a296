"""Saved Hugging Face objects for the handler's code: rebind each with its own class's ``from_pretrained``.

``handler_model.py`` calls ``load_object(__file__, NAME, "module:Qual.Name", dtype)`` before the user's code
runs (or ``load_object(__file__, NAME, MyModel, dtype)`` after the code of ``MyModel``, a class a cell defined): the object saved at capture (``save_pretrained``, safetensors and JSON only) under ``hf_objects/NAME/``
in the model dir is read back with local files only (no hub access) and never with ``trust_remote_code``.
A model comes back in ``eval()`` mode with the dtype it had in the kernel. Depends only on the standard
library (and, when a saved object is loaded, on the package its class comes from).
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

from .names import HF_DIR

ADAPTER_DIR, BASE_DIR = "adapter", "base"  # a PEFT model's two folders under hf_objects/NAME/ (msnb.capture.hf_peft)


class ObjectLoadError(RuntimeError):
    """A saved object cannot be read back on the server; the message ends with a ``Hint:`` line."""


def import_class(qualified: str) -> type:
    """The class named ``module:Qual.Name``, imported from its installed package."""
    module_name, _, qualname = qualified.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as err:
        top = module_name.split(".")[0]
        raise ObjectLoadError(
            f"The class {qualified} of a saved object cannot be imported: {type(err).__name__}: {err}\n"
            f"Hint: install the requirements of the archive ({top} at the notebook's version, see requirements.txt)."
        ) from None
    return found


def load_object(
    module_file: str, name: str, cls: str | type, dtype: str | None = None, base: str | type | None = None
) -> Any:
    """The object saved as ``name``, rebound with ``from_pretrained(folder, local_files_only=True)`` of ``cls`` (a
    class, or its ``module:Qual.Name``); a PEFT model (``base``: its base model's class) as its adapter on its base."""
    folder = Path(module_file).resolve().parent / HF_DIR / name
    qualified = cls if isinstance(cls, str) else f"{cls.__module__}:{cls.__qualname__}"
    cls = import_class(cls) if isinstance(cls, str) else cls
    base = import_class(base) if isinstance(base, str) else base
    try:
        with quiet_progress():
            obj = (
                cls.from_pretrained(str(folder), local_files_only=True) if base is None else _adapter(cls, base, folder)
            )
    except Exception as err:
        raise ObjectLoadError(
            f"{qualified}.from_pretrained({folder}) failed for `{name}`: {type(err).__name__}: {err}\n"
            f"Hint: rebuild the archive from the notebook; {HF_DIR}/{name} travels beside handler_model.py."
        ) from None
    if dtype is not None:  # a model: the kernel's dtype, in eval mode
        import torch

        obj = obj.to(getattr(torch, dtype)).eval()
    return obj


def _adapter(cls: type, base: type, folder: Path) -> Any:
    """A PEFT model: the base model from ``base/``, the adapter from ``adapter/`` (or ``adapter/NAME/``, the folder
    ``save_pretrained`` writes for an adapter not named "default") put back on it under its own name."""
    adapter = folder / ADAPTER_DIR
    named = [p.parent for p in adapter.glob("*/adapter_config.json")]
    if not (adapter / "adapter_config.json").exists() and len(named) == 1:
        return cls.from_pretrained(_base(base, folder), str(named[0]), adapter_name=named[0].name)
    return cls.from_pretrained(_base(base, folder), str(adapter))


def _base(base: type, folder: Path) -> Any:
    return base.from_pretrained(str(folder / BASE_DIR), local_files_only=True)


@contextlib.contextmanager
def quiet_progress():
    """No ``transformers`` progress bars ("Loading weights", "Writing model shards") while an object is moved."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
