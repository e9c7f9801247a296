"""The shared TorchServe handler every msnb .mar carries: load the model once, then answer batches sample by sample.

``handler_factory(init_function, ...)`` returns a ``BatchHandler``; ``handler_model.py`` binds it to the
module-level name ``handle`` that TorchServe calls. Depends only on torch, the standard library and
(optionally) TorchServe, never on msnb. Ships with ``handler/load.py`` (loading), ``handler/collate.py``
(collate/split/JSON rules), ``handler/envelope.py`` (KServe's request envelopes), ``handler/explain.py``
(explanations), ``handler/metrics.py`` (custom metrics) and ``handler/stream.py`` (generator roles' streamed answers)
beside it.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .collate import (
    CollateError,
    collate,
    has_tensor,
    json_safe,
    not_json,
    request_body,
    split,
    takes_keywords,
    to_device,
)
from .content_type import content_type
from .envelope import V1, envelope_of, request_error_answer, request_problem, v2_output, v2_sample
from .explain import Explainer, ExplainError, wants_explanation
from .explain_budget import ExplainBudget
from .fallback import FallbackRecorder
from .faults import NO_CUDA_HINT, input_fault, no_cuda, non_finite, request_non_finite
from .load import (
    DeviceFacts,
    HandlerLoadError,
    LoadSettings,
    check_server_torch,
    choose_device,
    gpu_memory_fraction,
    load_checkpoint,
    unpack_extra_files,
)
from .metrics import MetricsWindow
from .returns import PREPROCESS_HINT, ReturnError, preprocess_fault, unencodable
from .stream import Failure, is_streaming, stream_batch

logger = logging.getLogger(__name__)
HINTS = {
    "preprocess": "the request body does not fit preprocess(sample); compare the payload with what preprocess expects.",
    "inference": "the model's forward failed on this sample; check the preprocessed input's shape and dtype.",
    "postprocess": "postprocess(output) raised; run it in the notebook on this sample's model output.",
    "explain": "explain(model, model_input) raised; call it in the notebook on this sample's preprocessed input.",
    "explain-default": "the default explanation (Captum's Integrated Gradients on the preprocessed input) failed on "
    "this sample; check that the model takes the preprocessed tensor and returns (batch, classes), or define "
    "`def explain(model, model_input)` in the handler cell for another method.",
    "input": "the input does not fit the model (its shape, size or an index out of range): compare the request with "
    "the handler's --example; the model itself ran on inputs of the right shape.",
    "non-finite input": "the input holds NaN or Infinity (or numbers that overflow float32), so the answer does too: "
    "send finite numbers.",
    "non-finite preprocess": "preprocess(sample) made NaN or Infinity from a finite request (a division by zero, e.g. "
    "a standard deviation of 0, or a log of 0): run preprocess in the notebook on this request and check "
    "torch.isfinite(...).all().",
    "no-cuda": NO_CUDA_HINT,
    "serialise": "return JSON-serialisable values from postprocess (numbers, str, lists, dicts; tensors and numpy "
    "values are converted for you) or a whole str/bytes answer.",
    "non-finite": "strict JSON has no NaN or Infinity: check the input for values that overflow float32, or map "
    "non-finite numbers in postprocess (e.g. torch.nan_to_num, or None for a missing value).",
}


_Failed = Failure  # a sample that failed at some stage; becomes an error answer with its own status


class _ErrorAnswer(dict):
    """A failed sample's JSON answer (error, hint, stage, type); ``status`` is its HTTP status."""

    status = 500


def _set_statuses(context: Any, answers: list) -> None:
    """Give each failed request its own status and str/bytes answers their Content-Type, per request (when
    the batch holds one sample per request, as it must)."""
    processors = getattr(context, "request_processor", None) or []
    if len(processors) != len(answers):
        return
    for idx, answer in enumerate(answers):
        if not isinstance(answer, _ErrorAnswer):
            context.set_response_content_type(idx, content_type(answer))  # JSON answers too
            continue
        try:
            context.set_response_status(answer.status, f"{answer['stage']} failed", idx)
            context.set_response_content_type(idx, "application/json")
            for key, value in getattr(answer, "headers", {}).items():
                context.set_response_header(idx, key, value)
        except Exception:
            logger.warning("could not set the status of request %d", idx, exc_info=True)


class BatchHandler:
    """TorchServe entry point: ``handle(None, ctx)`` loads once, ``handle(batch, ctx)`` answers every request.

    A batch runs under ``torch.inference_mode()`` (preprocess and postprocess too); postprocess gets CPU
    tensors. ``device_facts`` can be replaced before loading to simulate a GPU; ``metrics`` reports the stage
    timings (a ``MetricsWindow``). After loading, ``model``,
    ``device`` and ``memory_fraction`` (None unless maxGPUMemory applied) describe what was chosen.
    """

    def __init__(
        self,
        init_function: Callable[..., torch.nn.Module],
        preprocess_function: Callable | None = None,
        postprocess_function: Callable | None = None,
        install_packages: Callable | None = None,
        unpack_dependencies: Callable | None = None,
        init_kwargs: dict | None = None,
        explain_function: Callable | None = None,
        inference_function: Callable | None = None,
    ):
        if not callable(init_function):
            raise TypeError(f"init_function must be callable, got {type(init_function).__name__}")
        self.init_function, self.init_kwargs = init_function, dict(init_kwargs or {})
        self.preprocess = preprocess_function or _identity
        self.postprocess = postprocess_function or _identity
        self.inference = inference_function or _call_model
        self.streaming = is_streaming(inference_function, postprocess_function)  # answers go out as chunks
        self.setup_steps = {"unpack_dependencies": unpack_dependencies, "install_packages": install_packages}
        self.device_facts = DeviceFacts()
        self.model: torch.nn.Module | None = None
        self.device: torch.device | None = None
        self.memory_fraction: float | None = None
        self.metrics = MetricsWindow()
        self.explainer = Explainer(explain_function)
        self.fallbacks = FallbackRecorder()  # batched forwards retried one by one (handler.fallback)
        self.explain_budget = ExplainBudget()  # explanations' share of the worker's time (handler.explain_budget)
        self._setup_done = False

    def __call__(self, data: list | None, context: Any) -> list | None:
        envelope = envelope_of(context)
        if data is None and (self.model is None or envelope is None):
            self.load(context)
            return None
        if self.model is None:
            self.load(context)
        with torch.inference_mode():
            if envelope is not None:
                return self.infer_enveloped(envelope, data, context)
            return self.infer(list(data), context)

    # ------------------------------------------------------------------ load
    def load(self, context: Any) -> None:
        """Unpack extra files, run the setup roles once, build the model, load its weights, move it."""
        if self.model is not None:
            return
        try:
            self._load(context)
        except HandlerLoadError:
            logger.exception("msnb handler: model load failed")
            raise
        except Exception as err:
            logger.exception("msnb handler: model load failed")
            raise HandlerLoadError(
                f"Loading the model failed: {type(err).__name__}: {err}",
                "the traceback above (model_log.log on a server) shows where.",
            ) from err

    def _load(self, context: Any) -> None:
        if sys.argv[0].endswith("model_service_worker.py"):  # a TorchServe worker, not an in-process test
            # A segfault or abort then leaves the Python stack in model_log.log (the worker's stderr).
            faulthandler.enable()
        settings = LoadSettings.from_context(context)
        check_server_torch(settings.model_dir)
        self._setup_once(settings.model_dir, settings.extra_files)
        device = self.pick_device(context)
        model = self._build_model()
        if settings.checkpoint:
            load_checkpoint(model, settings.model_dir / settings.checkpoint, device)
        self.model, self.device = model.to(device).eval(), device
        logger.info("msnb handler: %s loaded on %s", type(model).__name__, device)

    def _setup_once(self, model_dir: Path, extra_files: list[str]) -> None:
        if self._setup_done:
            return
        unpack_extra_files(model_dir, extra_files)
        for role, step in self.setup_steps.items():
            if step is None:
                continue
            try:
                step()
            except Exception as err:
                raise HandlerLoadError(
                    f"{role}() raised {type(err).__name__}: {err}", f"run {role}() in the notebook to see why it fails."
                ) from err
        self._setup_done = True

    def pick_device(self, context: Any) -> torch.device:
        """Choose the device from the context and ``device_facts``; cap GPU memory when maxGPUMemory is set."""
        facts, settings = self.device_facts, LoadSettings.from_context(context)
        device = choose_device(settings.gpu_id, settings.device_type, bool(facts.cuda_available()))
        if device.type == "cuda" and settings.max_gpu_memory:
            self.memory_fraction = gpu_memory_fraction(settings.max_gpu_memory, facts.total_memory_mb(device))
            facts.set_memory_fraction(self.memory_fraction, device)
        return device

    def _build_model(self) -> torch.nn.Module:
        try:
            model = self.init_function(**self.init_kwargs)
        except Exception as err:
            raise HandlerLoadError(
                f"init_function(**{self.init_kwargs!r}) raised {type(err).__name__}: {err}",
                "call init_function in the notebook with the same kwargs to see why.",
            ) from err
        if not isinstance(model, torch.nn.Module):
            raise HandlerLoadError(
                f"init_function returned a {type(model).__name__}, not a torch.nn.Module.",
                "return the model object (e.g. `return Net(hidden)`); the handler loads the checkpoint into it.",
            )
        return model

    # ------------------------------------------------------------------ batches
    def infer(self, data: list, context: Any) -> list:
        """Answer a batch: one item per request, errors as per-request answers with their own status."""
        # A customized describe is a job in the worker's queue too (a redeploy's drain barrier): answer it apart.
        describe = {idx for idx in range(len(data)) if _is_describe(context, idx)}
        refused = {idx: self._not_json(idx, data[idx], context) for idx in range(len(data)) if idx not in describe}
        refused = {idx: answer for idx, answer in refused.items() if answer is not None}
        kept = [idx for idx in range(len(data)) if idx not in describe and idx not in refused]
        asked = {pos for pos, idx in enumerate(kept) if wants_explanation(context, idx)}  # sent to /explanations
        samples = [request_body(data[idx]) for idx in kept]
        if self.streaming:
            answered = iter(stream_batch(self, samples, kept, asked, context))
        else:
            answered = iter(self.answer_samples(samples, context, explain=asked) if samples else [])
        answers = [
            self._describe() if idx in describe else refused[idx] if idx in refused else next(answered)
            for idx in range(len(data))
        ]
        _set_statuses(context, answers)
        return answers

    def _not_json(self, idx: int, request: Any, context: Any) -> dict | None:
        """A 400 for a body sent as JSON that does not parse, before preprocess sees its bytes."""
        problem = not_json(request, context, idx)
        if problem is None:
            return None
        err = ValueError(f"the request body is not JSON: {problem}")
        hint = "send a valid JSON body with Content-Type: application/json, or another Content-Type for raw bytes."
        answer = _ErrorAnswer(error=str(err), hint=hint, stage="request", type="BadRequest")
        answer.status = 400
        logger.warning("msnb handler: request %d: %s", idx, err)
        return answer

    def _describe(self) -> dict:
        return {"model": type(self.model).__name__, "device": str(self.device)}

    def infer_enveloped(self, envelope: str, data: Any, context: Any) -> list:
        """Answer ONE KServe request, its instances (v1) or input tensors (v2): always a 200 (handler.envelope)."""
        problem = request_problem(envelope, data)
        if problem:
            return request_error_answer(problem, envelope, context)
        if envelope == V1:
            return self.answer_samples(data, context)
        types = [tensor.get("datatype") if isinstance(tensor, dict) else None for tensor in data]
        answers = self.answer_samples([v2_sample(t) for t in data], context, lambda i, r: v2_output(r, types[i]))
        return [json.dumps(a) if isinstance(a, _ErrorAnswer) else a for a in answers]

    def answer_samples(
        self,
        samples: list,
        context: Any,
        encode: Callable[[int, Any], Any] | None = None,
        explain: set[int] | frozenset[int] = frozenset(),
    ) -> list:
        """preprocess each sample, one forward, postprocess and ``encode`` each (default: JSON-safe); the samples
        in ``explain`` skip the forward and are explained instead (handler.explain)."""
        answers: list = [None] * len(samples)
        marks = [time.perf_counter()]
        inputs = self.preprocess_each(samples, answers)
        marks.append(time.perf_counter())
        outputs = self.forward({idx: x for idx, x in inputs.items() if idx not in explain}, context)
        asked = {idx: x for idx, x in inputs.items() if idx in explain}
        explained = self._explain_within_budget(asked, samples)
        marks.append(time.perf_counter())
        for idx, output in outputs.items():
            answers[idx] = self._answer(idx, output, encode or _json_answer, inputs[idx], samples[idx])
        for idx, explanation in explained.items():
            answers[idx] = self._explanation(idx, explanation, encode or _json_answer)
        marks.append(time.perf_counter())
        stages = ("preprocess", "inference", "postprocess")
        self.metrics.add(context, {s: (marks[i + 1] - marks[i]) * 1000 for i, s in enumerate(stages)}, len(samples))
        return answers

    def preprocess_each(self, samples: list, answers: list, indices: list[int] | None = None) -> dict[int, Any]:
        """Each sample preprocessed, by position; a sample whose preprocess raises gets its error in ``answers``
        (``indices``: the samples' places in the batch, default their positions)."""
        inputs: dict[int, Any] = {}
        for pos, sample in enumerate(samples):
            try:
                inputs[pos] = self.preprocess(sample)
            except Exception as err:  # a CUDA call on a CPU worker is the code's fault, not the body's
                hint = (HINTS["no-cuda"], 500) if no_cuda(err) else ()
                answers[pos] = self.error(pos if indices is None else indices[pos], "preprocess", err, *hint)
        return inputs

    def _explain_within_budget(self, asked: dict[int, Any], samples: list) -> dict[int, Any]:
        """Explain ``asked`` when the explanation budget has room; otherwise refuse them at once (handler.explain_budget)."""
        if not asked:
            return {}
        if not self.explain_budget.admit():
            return {idx: self.explain_budget.refusal() for idx in asked}
        start = time.perf_counter()
        try:
            return self.explainer.explain(self.model, self.device, asked, {idx: samples[idx] for idx in asked})
        finally:
            self.explain_budget.spend(time.perf_counter() - start)

    def forward(self, inputs: dict[int, Any], context: Any = None) -> dict[int, Any]:
        """One forward for the whole batch; one per sample when it cannot be collated, run or split (the
        last two counted and logged as a batch fallback: handler.fallback)."""
        if not inputs:
            return {}
        samples = list(inputs.values())
        try:
            return dict(zip(inputs, split(self._run(collate(samples)), len(samples))))
        except CollateError as err:
            logger.info("msnb handler: %d samples cannot be batched (%s); one forward each", len(samples), err)
        except Exception as err:
            if len(samples) == 1 or not any(has_tensor(s) for s in samples):  # (no tensor: preprocess's doing)
                return {idx: _Failed("inference", err) for idx in inputs}
            self.fallbacks.record(context, err, len(samples))
        return {idx: self._forward_one(sample) for idx, sample in inputs.items()}

    def _forward_one(self, sample: Any) -> Any:
        try:
            return split(self._run(collate([sample])), 1)[0]
        except Exception as err:
            return _Failed("inference", err)

    def _run(self, batch: Any) -> Any:
        # postprocess always sees CPU tensors, on a GPU worker as on the notebook's CPU.
        return to_device(self.inference(self.model, to_device(batch, self.device)), torch.device("cpu"))

    def _answer(self, idx: int, output: Any, encode: Callable[[int, Any], Any], model_input=None, sample=None) -> Any:
        if isinstance(output, _Failed):
            own = self.preprocess is not _identity
            wrong = preprocess_fault(model_input, output.error, own) if output.stage == "inference" else None
            if wrong is not None:  # preprocess returned what no model takes: the code's fault, said as its own
                return self.error(idx, "preprocess", wrong, hint=PREPROCESS_HINT, status=500)
            if output.stage == "inference" and input_fault(output.error):  # the request is at fault: 400
                return self.error(idx, output.stage, output.error, hint=HINTS["input"], status=400)
            return self.error(idx, output.stage, output.error, HINTS["no-cuda"] if no_cuda(output.error) else None)
        try:
            result = self.postprocess(output)
        except Exception as err:
            return self.error(idx, "postprocess", err)
        try:
            return encode(idx, result)
        except NonFiniteError as err:
            if non_finite(model_input) and request_non_finite(sample):  # the client sent them: 400
                return self.error(idx, "serialise", err, hint=HINTS["non-finite input"], status=400)
            hint = HINTS["non-finite preprocess" if non_finite(model_input) else "non-finite"]
            return self.error(idx, "serialise", err, hint=hint)
        except (TypeError, ValueError) as err:
            role = "postprocess" if self.postprocess is not _identity else "the model (there is no postprocess role)"
            return self.error(idx, "serialise", unencodable(json_safe(result), role) or err)

    def _explanation(self, idx: int, explanation: Any, encode: Callable[[int, Any], Any]) -> Any:
        """An explanation goes out as it is (encoded like an answer); postprocess is for predictions only."""
        if isinstance(explanation, Exception):
            default = self.explainer.explain_function is None and not isinstance(explanation, ExplainError)
            answer = self.error(idx, "explain", explanation, hint=HINTS["explain-default"] if default else None)
            answer.headers = getattr(explanation, "headers", {})  # a refusal's Retry-After (handler.explain_budget)
            return answer
        try:
            return encode(idx, explanation)
        except NonFiniteError as err:
            return self.error(idx, "serialise", err, hint=HINTS["non-finite"])
        except (TypeError, ValueError) as err:
            return self.error(idx, "serialise", err)

    def error(
        self, idx: int, stage: str, err: BaseException, hint: str | None = None, status: int | None = None
    ) -> dict:
        # An ExplainError is a refusal with its own hint (the input cannot be explained), not a crash: no traceback;
        # nor a ReturnError, which says what the role returned (its traceback is the next step's, not the role's).
        said = isinstance(err, ReturnError)
        shown = None if said or isinstance(err, ExplainError) else err
        logger.error("msnb handler: request %d failed in %s: %s", idx, stage, err, exc_info=shown)
        message = str(err)[:2000] if said else f"{stage} failed: {type(err).__name__}: {err}"[:2000]
        hint = hint or (err.hint if isinstance(err, ExplainError) else HINTS[stage])
        answer = _ErrorAnswer(error=message, hint=hint, stage=stage, type=type(err).__name__)
        answer.status = status or (
            err.status if isinstance(err, ExplainError) else 400 if stage == "preprocess" else 500
        )
        return answer


def _is_describe(context: Any, idx: int) -> bool:
    try:
        return str(context.get_request_header(idx, "describe")) == "True"
    except Exception:  # a context without request headers (not a TorchServe one)
        return False


def handler_factory(
    init_function: Callable[..., torch.nn.Module],
    preprocess_function: Callable | None = None,
    postprocess_function: Callable | None = None,
    install_packages: Callable | None = None,
    unpack_dependencies: Callable | None = None,
    explain_function: Callable | None = None,
    inference_function: Callable | None = None,
    **init_kwargs: Any,
) -> BatchHandler:
    """The ``handle`` callable for one model: ``handle(None, context)`` loads, ``handle(batch, context)`` answers."""
    return BatchHandler(
        init_function,
        preprocess_function,
        postprocess_function,
        install_packages,
        unpack_dependencies,
        init_kwargs,
        explain_function,
        inference_function,
    )


def _identity(value: Any) -> Any:
    return value


def _call_model(model: torch.nn.Module, batch: Any) -> Any:
    """The default inference role: one forward of the whole batch (a dict of tensors as forward's keywords when
    forward takes them: a tokenizer's whole encoding)."""
    return model(**batch) if takes_keywords(model, batch) else model(batch)


# What torch says when a tensor's shape or size does not fit a layer (a request's fault, not the model's).
class NonFiniteError(ValueError):
    """An answer holds NaN or Infinity: ``json.dumps`` would write them, strict JSON parsers reject them."""


def _json_answer(idx: int, result: Any) -> Any:
    """A whole str/bytes answer as it is; anything else JSON-safe (TypeError/ValueError when it cannot be)."""
    if isinstance(result, (bytes, bytearray, str)):
        return result
    result = json_safe(result)
    json.dumps(result)
    try:  # json.dumps writes NaN/Infinity by default, which strict JSON parsers reject
        json.dumps(result, allow_nan=False)
    except ValueError:
        raise NonFiniteError("the answer holds NaN or Infinity, which strict JSON cannot carry") from None
    return result
