"""PEFT models the handler uses: the adapter and its base model, each saved with its own ``save_pretrained``.

A ``PeftModel`` (LoRA and the other PEFT methods) travels as two folders under ``hf_objects/NAME/``: ``adapter/``
(``PeftModel.save_pretrained``: adapter_config.json, adapter_model.safetensors) and ``base/`` (the base model without
the adapter's layers, ``save_pretrained(safe_serialization=True)``); the server rebinds it with the base class's
``from_pretrained`` and ``PeftModel.from_pretrained(base, adapter)`` (templates/msnb_runtime/handler/hf.py). The kernel's model is
never changed: the base is taken from a copy.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from msnb.templates.msnb_runtime.handler.hf import ADAPTER_DIR, BASE_DIR


def is_peft(value: Any) -> bool:
    """True for a PEFT model (``peft.PeftModel`` and its task classes)."""
    return (type(value).__module__ or "").split(".")[0] == "peft" and callable(getattr(value, "get_base_model", None))


def base_class(value: Any) -> type:
    """The class of the model the adapter sits on (a ``transformers`` model, or a class a cell defines)."""
    return type(value.get_base_model())


def problem(value: Any) -> str | None:
    """Why this PEFT model cannot travel as one adapter on its base, or None."""
    adapters = list(getattr(value, "peft_config", {}))
    if len(adapters) != 1:
        return f"holds {len(adapters)} adapters ({', '.join(adapters)}): one adapter travels on its base model"
    if not callable(getattr(value, "save_pretrained", None)):
        return "has no save_pretrained"
    return None


def save(value: Any, folder: str) -> None:
    """The adapter into ``folder/adapter`` and the base model without the adapter's layers into ``folder/base``."""
    value.save_pretrained(str(Path(folder) / ADAPTER_DIR), safe_serialization=True)
    twin = copy.deepcopy(value)  # unload() takes the adapter's layers out in place: never the kernel's model
    inner = twin.base_model
    base = inner.unload() if callable(getattr(inner, "unload", None)) else inner  # prompt learning: no layers added
    base.save_pretrained(str(Path(folder) / BASE_DIR), safe_serialization=True)
