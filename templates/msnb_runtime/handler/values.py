"""Runtime values for the handler's code: read values.pt (the kernel's snapshot) safely from the model dir.

``handler_model.py`` calls ``load_values(__file__, [...])`` before the user's code runs, so names the
notebook bound at run time (a vocabulary built by a loop, normalisation tensors) hold exactly the
kernel's values. Depends only on torch and the standard library (shipped in every .mar).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .names import VALUES_FILE


class ValuesLoadError(RuntimeError):
    """values.pt is missing, unreadable or lacks a name; the message ends with a ``Hint:`` line."""


def load_values(module_file: str, names: list[str]) -> dict[str, Any]:
    """The snapshotted values of ``names``, read with ``weights_only=True`` (no code runs while loading)."""
    path = Path(module_file).resolve().parent / VALUES_FILE
    try:
        values = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError) as err:
        raise ValuesLoadError(
            f"{VALUES_FILE} could not be read from {path.parent}: {err}\n"
            "Hint: rebuild the archive from the notebook; values.pt travels beside handler_model.py."
        ) from None
    missing = [n for n in names if n not in values]
    if missing:
        raise ValuesLoadError(
            f"{VALUES_FILE} holds no value for {', '.join(missing)}.\n"
            "Hint: rebuild the archive from the notebook so values.pt and handler_model.py match."
        )
    return {n: values[n] for n in names}
