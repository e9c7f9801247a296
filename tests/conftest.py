"""Fixtures shared by every tier: tiny handlers built from source, no model downloads."""

from __future__ import annotations

import pytest

from msnb.spec import spec_from_source
from tiny_handlers import MLP_SOURCE

@pytest.fixture
def mlp_source() -> str:
    return MLP_SOURCE


@pytest.fixture
def mlp_spec():
    """A small classifier handler: {"x": [4 floats]} -> {"label", "scores"}."""
    return spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, example={"x": [1, 2, 3, 4]})
