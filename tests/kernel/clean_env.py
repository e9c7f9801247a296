"""The clean serving environment the kernel tier's export tests use: only torch, TorchServe and what it needs."""

from __future__ import annotations

import venv
from pathlib import Path

from venvs import install

# What the serving image has: torch (the CPU wheel on these machines), TorchServe and what it needs to run.
CLEAN_PACKAGES = ["torch==2.13.0", "torchserve==0.12.0", "pyyaml", "numpy", "psutil", "requests"]


def make_clean_python(root: Path) -> Path:
    """A virtual environment at ``root`` with only CLEAN_PACKAGES (and pip, which TorchServe installs a model's
    requirements with): no msnb, no notebook folder; its python."""
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    install(python, *CLEAN_PACKAGES, timeout=600)
    return python
