"""KServe's request envelopes around the shared handler: which one wraps it, its requests' samples, its answers.

TorchServe's ``kserve`` (v1) and ``kservev2`` (v2) envelopes call the handler with the instances (or the
input tensors) of ONE request and wrap whatever list it returns into one response. KServe's wrapper
turns any non-2xx answer of TorchServe into a 500 whose body is a Python repr, so behind an envelope
every answer is a 200: a failed instance, an empty or malformed request is an error object in the body.

v2 answers are tensors (TorchServe's envelope names each output after its input, flattens it and takes
its datatype from the value's numpy dtype):

* a tensor keeps its dtype (bfloat16, which numpy lacks, becomes FP32);
* numbers and lists of numbers take the input's datatype when they are of its kind (floats for
  FP16/FP32/FP64, integers that fit for INT*/UINT*, booleans for BOOL), else FP64, INT64 or BOOL;
* a str (or UTF-8 bytes) is a BYTES output; anything else (a dict, a mixed list) is a BYTES output
  holding its JSON text — and so is an error: ``{"error", "hint", "stage", "type"}`` as JSON text.

A v2 BYTES input holding the JSON text of an object or a list is decoded before ``preprocess``, so a
handler written for JSON requests (``sample["x"]``) answers v2 too.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

V1, V2 = "kserve", "kservev2"
V2_DTYPES = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
}
# numpy (which TorchServe's v2 envelope converts answers with) has no bfloat16; the others map 1:1.
KEPT_DTYPES = set(V2_DTYPES.values())
ERROR_OUTPUT = "error"


def envelope_of(context: Any) -> str | None:
    """``kserve``, ``kservev2`` or None: the KServe envelope TorchServe calls this handler through.

    TorchServe tells a handler nothing about its envelope. The v2 envelope records the request's input
    names on the context before each call; for v1 the fact is TS_SERVICE_ENVELOPE, the variable KServe
    sets and TorchServe's workers inherit (``msnb export --kserve`` enables it with enable_envvars_config).
    """
    if hasattr(context, "input_names"):
        return V2
    return V1 if os.environ.get("TS_SERVICE_ENVELOPE") == V1 else None


def request_problem(envelope: str, data: Any) -> str | None:
    """What is wrong with a KServe request that holds no sample to predict, or None when it holds some."""
    what = '"instances"' if envelope == V1 else '"inputs"'
    if data is None:
        return f"the request has no {what} (or it is null)."
    if not isinstance(data, list):
        return f"{what} must be a list of samples, got a {type(data).__name__}."
    if not data:
        return f"{what} is empty: there is nothing to predict."
    return None


V1_HINT = 'send {"instances": [sample, ...]} with one sample per instance, as POST /v1/models/NAME:predict.'
V2_HINT = (
    'send {"inputs": [{"name": "input-0", "shape": [...], "datatype": "FP32", "data": [...]}]}, one input per '
    "sample; a JSON sample goes as a BYTES input holding its JSON text."
)


def request_error_answer(problem: str, envelope: str, context: Any) -> list:
    """The one answer (a 200 through the envelope) for a request that holds no sample."""
    hint = V1_HINT if envelope == V1 else V2_HINT
    answer = {"error": f"bad request: {problem}", "hint": hint, "stage": "request", "type": "BadRequest"}
    if envelope == V1:
        return [answer]
    context.input_names = [ERROR_OUTPUT]  # v2 names each output after an input; this one has none
    return [json.dumps(answer)]


def v2_sample(tensor: Any) -> Any:
    """One v2 input tensor's sample: its data (nested to its shape), a BYTES input's JSON text decoded."""
    data = tensor.get("data") if isinstance(tensor, dict) else tensor
    if isinstance(tensor, dict) and tensor.get("datatype") == "BYTES" and isinstance(data, str):
        try:
            decoded = json.loads(data)
        except ValueError:
            return data
        return decoded if isinstance(decoded, (dict, list)) else data
    return data


def v2_output(answer: Any, datatype: str | None) -> Any:
    """A v2 output value TorchServe's envelope turns into a conformant tensor (see the module docstring)."""
    if isinstance(answer, torch.Tensor):
        answer = answer.detach().cpu()
        return answer if answer.dtype in KEPT_DTYPES else answer.float()
    if type(answer).__module__ == "numpy" and hasattr(answer, "tolist"):
        return v2_output(torch.as_tensor(answer), datatype)
    if isinstance(answer, (bytes, bytearray)):
        try:
            return bytes(answer).decode("utf-8")
        except UnicodeDecodeError:
            raise TypeError("a bytes answer is not UTF-8 text, which a v2 BYTES output needs") from None
    if isinstance(answer, str):
        return answer
    numbers = _numeric(answer, V2_DTYPES.get(datatype or ""))
    return numbers if numbers is not None else json.dumps(answer)


def _numeric(value: Any, wanted: torch.dtype | None) -> torch.Tensor | None:
    """``value`` (a number or a regular nested list of numbers) as a tensor of ``wanted`` when it fits."""
    if isinstance(value, bool) or not isinstance(value, (int, float, list, tuple)):
        return torch.tensor(value) if isinstance(value, bool) else None
    try:
        natural = torch.tensor(value, dtype=torch.float64) if _has_float(value) else torch.tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    if wanted is None or _kind(wanted) != _kind(natural.dtype):
        return natural
    cast = natural.to(wanted)
    fits = torch.equal(cast.to(natural.dtype), natural) if _kind(wanted) == "int" else _same_infs(cast, natural)
    return cast if fits else natural


def _has_float(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_float(v) for v in value)
    return isinstance(value, float)


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point else "int"


def _same_infs(cast: torch.Tensor, natural: torch.Tensor) -> bool:
    # FP16 overflows to inf above 65504: such values stay FP64 rather than turn into infinities.
    return bool((cast.isinf() == natural.isinf()).all())
