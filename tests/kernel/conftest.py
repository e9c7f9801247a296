"""The kernel tier's shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from clean_env import make_clean_python


# Here, not in a test module: a session fixture imported into a second module is a second fixture, built twice.
@pytest.fixture(scope="session")
def clean_python(tmp_path_factory) -> Path:
    """A TorchServe environment with only torch and TorchServe's needs (``clean_env``), one per run."""
    return make_clean_python(tmp_path_factory.mktemp("clean-venv"))
