"""Pure data helpers of the shared handler: collate samples into a batch, split outputs, make answers JSON-safe.

Rules (the contract users rely on):

* ``request_body(request)`` — TorchServe hands each request as a dict: its ``data`` or ``body`` value
  (parsed JSON, a ``bytearray`` for octet-stream or invalid JSON, a ``str`` for text/plain) is the sample;
  a multipart request (one key per field) is passed whole. ``not_json(request, context, idx)`` is the JSON
  parser's message for a body sent as ``application/json`` that does not parse (TorchServe forwards its bytes).

* ``collate(samples)`` — tensors (and numpy arrays) of one shape and dtype are stacked along a new
  leading dim; dicts with the same keys and tuples/lists of the same length that hold tensors are
  collated element-wise; values that hold no tensor at all are passed as a plain Python list of the
  samples (the model then receives ``[sample0, sample1, ...]``). Anything else (ragged shapes, mixed
  types) raises ``CollateError`` and the handler runs one forward per sample instead.
  A tokenizer's encoding of one text (a ``BatchEncoding``, ``return_tensors="pt"``) is that sample's dict,
  its leading batch dim of 1 dropped; any other mapping is collated as a dict.
* ``takes_keywords(model, batch)`` — a collated dict whose keys all name parameters of ``model.forward``
  (``input_ids``, ``attention_mask``) is passed as keyword arguments: ``model(**batch)``.
* ``split(output, n)`` — a tensor is unbound along dim 0 (which must have length ``n``); a dict (a
  ``transformers`` ``ModelOutput`` too: each sample gets one of the same type, ``output["logits"]``) or a
  tuple/list of batched tensors is split element-wise; any other list of length ``n`` is already one
  item per sample. With ``n == 1`` an output that cannot be split is that one sample's output.
* ``json_safe(obj)`` — tensors, numpy arrays and numpy scalars become lists/numbers, recursively
  inside dicts, lists and tuples; everything else is returned unchanged (checked by the caller).
  Answers are strict JSON: the caller refuses NaN and Infinity (``json.dumps(..., allow_nan=False)``),
  so a sample whose answer holds one fails on its own with a hint, in-process and on the server alike.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

import torch

from .content_type import JSON_TYPE

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class CollateError(ValueError):
    """Samples cannot be combined into one batch (the caller falls back to per-sample forwards)."""


class SplitError(ValueError):
    """A model output cannot be split into one item per sample."""


def _is_numpy(obj: Any) -> bool:
    # numpy stays optional: recognise its arrays and scalars without importing it.
    return type(obj).__module__ == "numpy" and hasattr(obj, "tolist")


def _leaf(obj: Any) -> Any:
    if _is_numpy(obj) and getattr(obj, "ndim", 0) > 0:
        return torch.as_tensor(obj)
    if isinstance(obj, Mapping) and not isinstance(obj, dict):
        return _one_encoding(dict(obj)) if type(obj).__name__ == "BatchEncoding" else dict(obj)
    return obj


def _one_encoding(encoding: dict) -> dict:
    """A tokenizer's encoding of ONE text holds a batch of one: its tensors without that leading dim."""
    if encoding and all(isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == 1 for v in encoding.values()):
        return {k: v[0] for k, v in encoding.items()}
    return encoding


def _like(obj: dict, items: dict) -> dict:
    """``items`` as a mapping of ``obj``'s type where it can be built from keywords (a ModelOutput), else a dict."""
    if type(obj) is dict or not all(isinstance(k, str) for k in items):
        return items
    try:
        return type(obj)(**items)
    except Exception:
        return items


def takes_keywords(model: Any, batch: Any) -> bool:
    """True when ``batch`` is a dict whose keys all name parameters of ``model``'s forward (which takes several):
    call ``model(**batch)``."""
    if type(batch) is not dict or not batch or not all(isinstance(k, str) for k in batch):
        return False
    try:
        parameters = inspect.signature(getattr(model, "forward", model)).parameters
    except (TypeError, ValueError):
        return False
    named = {n for n, p in parameters.items() if p.kind in _NAMED}
    # A forward of one parameter takes the dict itself (``forward(self, x)`` reading ``x["x"]``), as it always did.
    return len(named) > 1 and set(batch) <= named


def request_body(request: Any) -> Any:
    """One request's decoded body: its ``data`` or ``body`` field, else the whole dict (multipart fields)."""
    if not isinstance(request, dict):
        return request
    for key in ("data", "body"):
        if key in request:
            return request[key]
    return dict(request)


def not_json(request: Any, context: Any, idx: int) -> str | None:
    """The parser's message when a body sent with a JSON Content-Type is not JSON; None otherwise."""
    key = next((k for k in ("data", "body") if isinstance(request, dict) and k in request), None)
    if key is None or not isinstance(request[key], (bytes, bytearray)):
        return None
    if not _content_type(context, idx, key).startswith(JSON_TYPE):
        return None
    try:
        json.loads(bytes(request[key]).decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError is one
        return str(err)[:500]
    except RecursionError:  # valid, but deeper than Python's parser goes (a 100k-deep array)
        return "nested too deeply to decode"
    return None


def _content_type(context: Any, idx: int, key: str) -> str:
    """TorchServe gives each body its own header ({"content-type": ...}); Ray's adapter the request's."""
    try:
        part = context.get_request_header(idx, key)
        whole = context.get_request_header(idx, "content-type") or context.get_request_header(idx, "Content-Type")
    except Exception:  # a context without request headers
        return ""
    found = part.get("content-type") if isinstance(part, dict) else whole
    return str(found or "").lower()


def has_tensor(obj: Any) -> bool:
    """True when ``obj`` is, or contains (in dicts/lists/tuples), a tensor or a numpy array."""
    obj = _leaf(obj)
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, dict):
        return any(has_tensor(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(has_tensor(v) for v in obj)
    return False


def collate(samples: list) -> Any:
    """Combine per-sample model inputs into one batched input (see the module docstring)."""
    if not samples:
        raise CollateError("no samples to collate")
    if not any(has_tensor(s) for s in samples):
        return list(samples)
    samples = [_leaf(s) for s in samples]
    first = samples[0]
    if all(isinstance(s, torch.Tensor) for s in samples):
        return _stack(samples)
    if all(isinstance(s, dict) for s in samples):
        if any(s.keys() != first.keys() for s in samples):
            raise CollateError("dict samples have different keys")
        return {k: collate([s[k] for s in samples]) for k in first}
    if all(type(s) is type(first) and isinstance(s, (list, tuple)) for s in samples):
        if any(len(s) != len(first) for s in samples):
            raise CollateError("sequence samples have different lengths")
        columns = [collate(list(col)) for col in zip(*samples)]
        return tuple(columns) if isinstance(first, tuple) else columns
    raise CollateError("samples mix tensors with other types")


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            raise CollateError(
                f"tensor shapes/dtypes differ: {tuple(first.shape)} {first.dtype} vs {tuple(t.shape)} {t.dtype}"
            )
    return torch.stack(tensors)


def _is_batched(obj: Any, n: int) -> bool:
    return isinstance(obj, torch.Tensor) and obj.dim() > 0 and obj.shape[0] == n


def split(output: Any, n: int) -> list:
    """Split one batched model output into ``n`` per-sample outputs (see the module docstring)."""
    try:
        return _split(output, n)
    except SplitError:
        if n == 1:
            return [output]
        raise


def _split(output: Any, n: int) -> list:
    if isinstance(output, torch.Tensor):
        if not _is_batched(output, n):
            raise SplitError(f"output of shape {tuple(output.shape)} has no leading batch dim of {n}")
        return list(output.unbind(0))
    if isinstance(output, dict):
        columns = {k: _split(v, n) for k, v in output.items()}
        return [_like(output, {k: col[i] for k, col in columns.items()}) for i in range(n)]
    if isinstance(output, (list, tuple)) and output and all(_is_batched(v, n) for v in output):
        columns = [_split(v, n) for v in output]
        return [type(output)(col[i] for col in columns) for i in range(n)]
    if isinstance(output, list) and len(output) == n:
        return list(output)
    raise SplitError(f"cannot split a {type(output).__name__} into {n} samples")


def to_device(obj: Any, device: torch.device) -> Any:
    """Move every tensor inside ``obj`` (dicts/lists/tuples) to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return _like(obj, {k: to_device(v, device) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def json_safe(obj: Any) -> Any:
    """Turn tensors / numpy values into lists and numbers, recursively; other values unchanged."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    if _is_numpy(obj):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
