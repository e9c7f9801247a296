"""Whose fault a failed sample is: the request's (400, a hint for the client) or the handler's or machine's (500)."""

from __future__ import annotations

import math
import re
from typing import Any

_SHAPE_FAULT = re.compile(r"shape|size of tensor|sizes? mismatch|dimension|mat1 and mat2|expected input", re.I)
_NO_CUDA = re.compile(
    r"not compiled with CUDA|no CUDA GPUs|CUDA driver|no NVIDIA driver|cuda.*(unavailable|not available)", re.I
)
_FLOAT32_MAX = 3.4028234663852886e38
_WALK_LIMIT = 100_000  # entries looked at in one request body: a bound, not a parser


def input_fault(err: BaseException) -> bool:
    """A forward failure caused by the input: a shape or size mismatch, or an index out of range (embeddings)."""
    return isinstance(err, IndexError) or (isinstance(err, RuntimeError) and bool(_SHAPE_FAULT.search(str(err))))


NO_CUDA_HINT = (
    "the code asks for CUDA (.cuda(), device='cuda') on a worker without a GPU: leave devices to the handler (it "
    "moves the model and the batch to the worker's device, a GPU when there is one), or use .to(model's device)."
)


def no_cuda(err: BaseException | str) -> bool:
    """The code asked for CUDA (``.cuda()``, ``device="cuda"``) on a machine or worker without a GPU."""
    return bool(_NO_CUDA.search(err if isinstance(err, str) else f"{type(err).__name__}: {err}"))


def non_finite(value: Any) -> bool:
    """Whether a preprocessed input holds NaN or Infinity (tensors, also inside lists, tuples and dicts)."""
    import torch  # here: the notebook's client reads NO_CUDA_HINT without importing torch

    if torch.is_tensor(value):
        return value.is_floating_point() and not bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return any(non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(non_finite(v) for v in value)
    return isinstance(value, float) and not math.isfinite(value)


def request_non_finite(sample: Any) -> bool:
    """Whether the request body itself holds NaN, Infinity or a number float32 cannot hold (the client's doing);
    a body without them that preprocess turns into NaN is the handler's."""
    stack, seen = [sample], 0
    while stack and seen < _WALK_LIMIT:
        value, seen = stack.pop(), seen + 1
        if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= _FLOAT32_MAX):
            return True
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT32_MAX:
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return seen >= _WALK_LIMIT  # too large to tell: as before, the request
