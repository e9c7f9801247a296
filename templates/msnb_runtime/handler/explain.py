"""Explanations for TorchServe's ``/explanations``: which requests ask for one, the user's ``explain`` role or Captum.

TorchServe routes ``POST /explanations/{model}`` to the same handler as predictions; each request of a
batch carries the header ``explain: "True"`` or ``"False"`` (measured on TorchServe 0.12: one batch can
mix both). Without an ``explain`` role the default is Captum's Integrated Gradients on the model's
predicted class (or the request's ``target``), from an all-zeros baseline in ``N_STEPS`` steps; Captum is
imported only when such an explanation is asked for. Depends only on torch and the standard library.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

METHOD = "integrated_gradients"
N_STEPS = 50  # Captum's default step count (Gauss-Legendre)
BASELINE = "zeros"
DEFINE_EXPLAIN = (
    "define `def explain(model, model_input)` in the handler cell (e.g. Captum's LayerIntegratedGradients "
    "over the embedding layer for token ids); it returns JSON-able attributions for one sample."
)


class ExplainError(Exception):
    """A sample that cannot be explained; ``status`` is its HTTP status and ``hint`` says what to do."""

    def __init__(self, message: str, hint: str, status: int = 400):
        super().__init__(message)
        self.hint, self.status = hint, status


def wants_explanation(context: Any, idx: int) -> bool:
    """True when request ``idx`` of the batch came through ``/explanations``."""
    try:
        return str(context.get_request_header(idx, "explain")) == "True"
    except Exception:  # no request processors (a bare call): a prediction
        return False


class Explainer:
    """Explains preprocessed samples with ``explain_function(model, model_input[, target])`` or, by default,
    Integrated Gradients batched over the samples that share one shape."""

    def __init__(self, explain_function: Callable | None = None, n_steps: int = N_STEPS):
        self.explain_function, self.n_steps = explain_function, n_steps

    def explain(self, model: torch.nn.Module, device: torch.device, inputs: dict, bodies: dict) -> dict:
        """idx -> JSON-able explanation, or the exception that sample failed with."""
        if not inputs:
            return {}
        with torch.inference_mode(False), torch.enable_grad():
            if self.explain_function is not None:
                return {idx: self._custom(model, device, sample, bodies[idx]) for idx, sample in inputs.items()}
            return self._integrated_gradients(model, device, inputs, bodies)

    def _custom(self, model: torch.nn.Module, device: torch.device, sample: Any, body: Any) -> Any:
        try:
            kwargs = {"target": request_target(body)} if _takes_target(self.explain_function) else {}
            return self.explain_function(model, _trainable(sample, device), **kwargs)
        except Exception as err:
            return err

    def _integrated_gradients(self, model: torch.nn.Module, device: torch.device, inputs: dict, bodies: dict) -> dict:
        answers: dict = {}
        groups: dict[tuple, dict] = {}
        for idx, sample in inputs.items():
            try:
                tensor, target = _float_input(sample), request_target(bodies[idx])
            except ExplainError as err:
                answers[idx] = err
                continue
            groups.setdefault((tuple(tensor.shape), tensor.dtype), {})[idx] = (tensor, target)
        for group in groups.values():
            answers.update(self._ig_group(model, device, group))
        return answers

    def _ig_group(self, model: torch.nn.Module, device: torch.device, group: dict) -> dict:
        try:
            return _ig_batch(model, device, group, self.n_steps)
        except Exception as err:
            if len(group) == 1:
                return {idx: err for idx in group}
        answers: dict = {}
        for idx, item in group.items():  # one sample's problem (a target out of range) must not fail the others
            answers.update(self._ig_group(model, device, {idx: item}))
        return answers


def _ig_batch(model: torch.nn.Module, device: torch.device, group: dict, n_steps: int) -> dict:
    ig_class = _captum_integrated_gradients()
    x = torch.stack([tensor for tensor, _ in group.values()]).to(device)
    baseline = torch.zeros_like(x)
    output = model(x)
    targets = _targets(output, [target for _, target in group.values()])
    attributions, delta = ig_class(model).attribute(
        x, baselines=baseline, target=targets, n_steps=n_steps, return_convergence_delta=True
    )
    at_input, at_baseline = _at_target(output, targets), _at_target(model(baseline), targets)
    return {
        idx: {
            "method": METHOD,
            "target": None if targets is None else int(targets[i]),
            "attributions": attributions[i].detach().cpu().tolist(),
            "delta": float(delta[i]),
            "output": float(at_input[i]),
            "baseline_output": float(at_baseline[i]),
            "baseline": BASELINE,
            "n_steps": n_steps,
        }
        for i, idx in enumerate(group)
    }


def _targets(output: Any, requested: list) -> torch.Tensor | None:
    if not isinstance(output, torch.Tensor) or output.dim() not in (1, 2):
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ExplainError(
            f"Integrated Gradients needs a model output of shape (batch, classes) or (batch,), got {shape}.",
            DEFINE_EXPLAIN,
        )
    if output.dim() == 1:
        if any(t is not None for t in requested):
            raise ExplainError(
                "The model has one output per sample: a 'target' class makes no sense.", "drop 'target'."
            )
        return None
    predicted = output.argmax(-1).tolist()
    chosen = [p if t is None else t for p, t in zip(predicted, requested)]
    if max(chosen) >= output.shape[-1]:
        raise ExplainError(
            f"target {max(chosen)} is out of range: the model has {output.shape[-1]} classes.",
            f"send a 'target' from 0 to {output.shape[-1] - 1}, or none for the predicted class.",
        )
    return torch.tensor(chosen, device=output.device)


def _at_target(output: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
    if targets is None:
        return output.detach()
    return output.detach().gather(1, targets.unsqueeze(1)).squeeze(1)


def _float_input(sample: Any) -> torch.Tensor:
    if type(sample).__module__ == "numpy" and hasattr(sample, "ndim"):
        sample = torch.as_tensor(sample)
    if not isinstance(sample, torch.Tensor):
        raise ExplainError(
            f"Integrated Gradients explains one floating-point tensor; preprocess returned a {type(sample).__name__}.",
            DEFINE_EXPLAIN,
        )
    if not sample.is_floating_point():
        raise ExplainError(
            f"Integrated Gradients needs floating-point inputs; preprocess returned a {sample.dtype} tensor "
            "(token ids or categories have no gradient).",
            DEFINE_EXPLAIN,
        )
    # a clone outside inference mode is a normal tensor that autograd can record
    return sample.detach().clone()


def request_target(body: Any) -> int | None:
    """The class to explain: the request's ``target`` field (a JSON object's key), else None (predicted)."""
    if not isinstance(body, dict) or body.get("target") is None:
        return None
    target = body["target"]
    if isinstance(target, bool) or not isinstance(target, int) or target < 0:
        raise ExplainError(
            f"'target' must be a class index (an integer >= 0), got {target!r}.", "send e.g. 'target': 1."
        )
    return target


def _trainable(sample: Any, device: torch.device) -> Any:
    """The sample on ``device``, its tensors cloned out of inference mode (so autograd can use them)."""
    if isinstance(sample, torch.Tensor):
        return sample.detach().clone().to(device)
    if isinstance(sample, dict):
        return {k: _trainable(v, device) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return type(sample)(_trainable(v, device) for v in sample)
    return sample


def _takes_target(function: Callable) -> bool:
    try:
        return "target" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _captum_integrated_gradients() -> type:
    try:
        from captum.attr import IntegratedGradients
    except ImportError as err:
        raise ExplainError(
            f"Captum is not installed where this handler runs ({err}); the default explanation needs it.",
            "install it next to TorchServe (`pip install 'msnb[explain]'`), or add captum to --requirements, "
            "or " + DEFINE_EXPLAIN,
            status=500,
        ) from err
    return IntegratedGradients
