"""Fixtures shared by every tier: tiny handlers built from source, no model downloads."""

from __future__ import annotations

import textwrap

import pytest

from msnb.spec import spec_from_source

MLP_SOURCE = textwrap.dedent(
    '''
    import torch

    class MLP(torch.nn.Module):
        def __init__(self, hidden=8):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, hidden)
            self.fc2 = torch.nn.Linear(hidden, 3)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    def init_function(hidden=8):
        torch.manual_seed(0)
        return MLP(hidden)

    def preprocess(sample):
        if not isinstance(sample, dict) or "x" not in sample:
            raise ValueError("expected a JSON object with key 'x' (4 numbers)")
        values = torch.tensor(sample["x"], dtype=torch.float32)
        if values.shape != (4,):
            raise ValueError(f"'x' must hold 4 numbers, got shape {tuple(values.shape)}")
        return values

    def postprocess(output):
        return {"label": int(output.argmax()), "scores": [round(float(v), 5) for v in output]}
    '''
)


@pytest.fixture
def mlp_source() -> str:
    return MLP_SOURCE


@pytest.fixture
def mlp_spec():
    """A small classifier handler: {"x": [4 floats]} -> {"label", "scores"}."""
    return spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, example={"x": [1, 2, 3, 4]})
