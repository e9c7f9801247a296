"""Streamed answers of the shared handler: the chunks a generator role yields, sent to each request as they come.

A generator ``inference(model, batch)`` yields batch outputs: each is split per sample and each sample's piece goes
through ``postprocess`` (a generator ``postprocess`` may turn one piece into several chunks). A plain ``inference``
with a generator ``postprocess`` streams each request's own chunks. Wire format per request, chosen by its first
chunk: str chunks as UTF-8 text (``text/plain``, their concatenation is the whole answer), anything else as one JSON
document per line (``application/jsonl``). A failure mid-stream ends that request's stream with a JSON error line
(the chunks already sent stay sent); a failure before its first chunk is an ordinary error answer with its status.

On TorchServe each chunk is an intermediate response (``ts.handler_utils.utils.send_intermediate_predict_response``:
the HTTP answer is chunked, the handler's return value is each request's last piece). Another engine's context
carries its own ``msnb_send_chunks(pieces, types)``, which returns the requests whose clients went away: their
streams end, and a generator no request reads any more is closed. On msnb's local TorchServe the streams its front
ends early are told the same way (handler.cancel). Depends only on torch, the standard library and
(optionally) TorchServe, never on msnb.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .cancel import Cancels
from .collate import CollateError, collate, json_safe, split, to_device
from .content_type import JSONL_TYPE, TEXT_TYPE
from .serving import FIRST_PIECE_HEAD_START_S

logger = logging.getLogger(__name__)
CPU = torch.device("cpu")
CHUNK_HINTS = {
    "type": "yield JSON-serialisable chunks (numbers, str, lists, dicts; tensors and numpy values are converted) "
    "from the generator, e.g. `yield str(x)` or `yield {{'value': ...}}` instead of a {kind}.",
    "text": "a stream whose first chunk is a str sends text: yield str chunks only (or dicts only, as JSON lines).",
    "non-finite": "strict JSON has no NaN or Infinity: map non-finite numbers before yielding them.",
    "inference": "the generator inference(model, batch) raised while streaming (each yield must be a batch output "
    "whose first dimension is the batch); run it in the notebook on this input, e.g. "
    "`for out in inference(model, batch): print(out)`.",
}


def is_streaming(*roles: Callable | None) -> bool:
    """Whether any of the roles is a generator function (its answers stream)."""
    return any(role is not None and inspect.isgeneratorfunction(role) for role in roles)


class ChunkError(ValueError):
    """A chunk cannot go out on its request's stream; ``hint`` says what to yield instead."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


class RequestStream:
    """One request's stream: its batch index, wire format (set by its first chunk), chunks sent, how it ended."""

    def __init__(self, idx: int):
        self.idx, self.mode, self.sent = idx, None, 0
        self.failure: dict | None = None  # the error answer that ended it
        self.gone = False  # its client went away (an engine that can tell: Ray Serve)

    @property
    def ended(self) -> bool:
        return self.failure is not None or self.gone

    def encode(self, chunk: Any) -> str:
        """The chunk as it goes on the wire (str or one JSON line); the first one fixes the stream's format."""
        mode = self.mode or (TEXT_TYPE if isinstance(chunk, str) else JSONL_TYPE)
        if mode == TEXT_TYPE:
            if not isinstance(chunk, str):
                raise ChunkError(f"chunk {self.sent} is a {type(chunk).__name__} in a text stream", CHUNK_HINTS["text"])
            text = chunk
        else:
            text = json_line(chunk, self.sent)
        self.mode = mode
        return text

    def last_piece(self) -> Any:
        """What the handler returns for this request: nothing more, or its error line once it streamed."""
        if self.failure is None:
            return ""
        if self.sent == 0:
            return self.failure  # nothing went out yet: an ordinary error answer with its own status
        line = json.dumps(dict(self.failure)) + "\n"
        return ("\n" + line) if self.mode == TEXT_TYPE else line


def json_line(chunk: Any, number: int = 0) -> str:
    """One chunk as a JSON line (tensors and numpy values converted); ChunkError when JSON cannot carry it."""
    value = json_safe(chunk)
    try:
        return json.dumps(value, allow_nan=False) + "\n"
    except TypeError as err:  # "Object of type X is not JSON serializable": X is what to convert
        found = re.search(r"type (\w+)", str(err))
        kind = found.group(1) if found else type(chunk).__name__
        where = "" if kind == type(chunk).__name__ else f" (inside a {type(chunk).__name__})"
        raise ChunkError(
            f"chunk {number} holds a {kind}{where}, which JSON cannot carry", CHUNK_HINTS["type"].format(kind=kind)
        ) from None
    except ValueError:
        raise ChunkError(f"chunk {number} holds NaN or Infinity", CHUNK_HINTS["non-finite"]) from None


class Failure:
    """A request whose stream failed at ``stage`` (a source yields it in place of its chunks)."""

    def __init__(self, stage: str, error: BaseException, hint: str | None = None):
        self.stage, self.error, self.hint = stage, error, hint


class Source:
    """One generator feeding some requests: each step maps a sample position to its chunks (or a Failure)."""

    def __init__(self, positions: list[int], steps: Iterator[dict[int, Any]]):
        self.positions, self.steps = positions, steps

    def close(self) -> None:
        close = getattr(self.steps, "close", None)
        if close is not None:
            close()


def stream_batch(handler: Any, samples: list, kept: list[int], asked: set[int], context: Any) -> list:
    """Every sample's answer streamed; the ones sent to /explanations (positions in ``asked``) answered whole.
    ``kept``: each sample's request index in the batch."""
    answers: list = [None] * len(samples)
    streamed = [pos for pos in range(len(samples)) if pos not in asked]
    parts = [samples[pos] for pos in streamed]
    for pos, answer in zip(
        streamed, stream_samples(handler, parts, [kept[p] for p in streamed], context) if parts else []
    ):
        answers[pos] = answer
    explained = sorted(asked)
    whole = [samples[pos] for pos in explained]
    for pos, answer in zip(
        explained, handler.answer_samples(whole, context, explain=set(range(len(whole)))) if whole else []
    ):
        answers[pos] = answer
    return answers


def stream_samples(handler: Any, samples: list, indices: list[int], context: Any) -> list:
    """Answer ``samples`` (the requests at batch ``indices``) by streaming their chunks; returns each request's
    last piece (``handler``: the shared handler's preprocess, inference, postprocess, model and errors)."""
    answers: list = [None] * len(samples)
    inputs: dict[int, Any] = {}
    marks = [time.perf_counter()]
    for pos, sample in enumerate(samples):
        try:
            inputs[pos] = handler.preprocess(sample)
        except Exception as err:
            answers[pos] = handler.error(indices[pos], "preprocess", err)
    streams = {pos: RequestStream(indices[pos]) for pos in inputs}
    marks.append(time.perf_counter())
    if inputs:
        pump(handler, sources(handler, inputs, context), streams, sender(context, [indices[p] for p in inputs]))
    marks.append(time.perf_counter())  # the whole stream counts as inference (postprocess runs inside it)
    timings = {"preprocess": marks[1] - marks[0], "inference": marks[2] - marks[1], "postprocess": 0.0}
    handler.metrics.add(context, {stage: seconds * 1000 for stage, seconds in timings.items()}, len(samples))
    for pos, stream in streams.items():
        answers[pos] = stream.last_piece()
    return answers


def sources(handler: Any, inputs: dict[int, Any], context: Any) -> list[Source]:
    """The generators feeding a batch's streams: one generator ``inference`` over the collated batch (one per
    sample when the samples cannot be collated), or one generator ``postprocess`` per request."""
    if inspect.isgeneratorfunction(handler.inference):
        try:
            batch = collate(list(inputs.values()))
        except CollateError as err:
            if len(inputs) == 1:
                return [Source(list(inputs), iter([{pos: Failure("inference", err) for pos in inputs}]))]
            logger.info("msnb handler: %d samples cannot be batched (%s); one generator each", len(inputs), err)
            return [source for pos, x in inputs.items() for source in sources(handler, {pos: x}, context)]
        return [Source(list(inputs), _inference_steps(handler, list(inputs), batch))]
    outputs = handler.forward(inputs, context)
    return [Source([pos], _postprocess_steps(handler, pos, output)) for pos, output in outputs.items()]


def _inference_steps(handler: Any, positions: list[int], batch: Any) -> Iterator[dict[int, Any]]:
    """Each batch output the generator ``inference`` yields, split per sample and postprocessed."""
    steps = None
    try:
        steps = handler.inference(handler.model, to_device(batch, handler.device))
        for output in steps:
            pieces = split(to_device(output, CPU), len(positions))
            yield {pos: _postprocessed(handler, piece) for pos, piece in zip(positions, pieces)}
    except Exception as err:
        yield {pos: Failure("inference", err, CHUNK_HINTS["inference"]) for pos in positions}
    finally:
        if steps is not None:
            steps.close()  # a stream that ends early (every request failed) stops the model's generator


def _postprocessed(handler: Any, piece: Any) -> Any:
    """One sample's piece through postprocess: its chunks (one, or a generator postprocess's), or a Failure."""
    try:
        result = handler.postprocess(piece)
        return list(result) if inspect.isgenerator(result) else [result]
    except Exception as err:
        return Failure("postprocess", err)


def _postprocess_steps(handler: Any, pos: int, output: Any) -> Iterator[dict[int, Any]]:
    """One request's chunks from a generator postprocess of its output."""
    if isinstance(output, Failure):
        yield {pos: output}
        return
    chunks = None
    try:
        chunks = handler.postprocess(output)
        for chunk in chunks if inspect.isgenerator(chunks) else [chunks]:
            yield {pos: [chunk]}
    except Exception as err:
        yield {pos: Failure("postprocess", err)}
    finally:
        if inspect.isgenerator(chunks):
            chunks.close()


def pump(handler: Any, feeding: list[Source], streams: dict[int, RequestStream], send: Callable) -> None:
    """Step the sources in turn, sending each step's chunks at once; a source whose requests all ended is closed."""
    active = list(feeding)
    while active:
        for source in list(active):
            step = next(source.steps, None)
            if step is not None:
                pieces = {streams[pos].idx: _wire(handler, streams[pos], chunks) for pos, chunks in step.items()}
                pieces = {idx: text for idx, text in pieces.items() if text}
                if pieces:
                    types = {stream.idx: stream.mode for stream in streams.values() if stream.idx in pieces}
                    gone = send(pieces, types) or ()  # the requests whose clients went away
                    for stream in streams.values():
                        stream.gone = stream.gone or stream.idx in gone
            if step is None or all(streams[pos].ended for pos in source.positions):
                source.close()
                active.remove(source)


def _wire(handler: Any, stream: RequestStream, chunks: Any) -> str:
    """The text that goes out for one step of one request; a failure ends its stream (earlier chunks still go)."""
    if stream.ended:
        return ""
    if isinstance(chunks, Failure):
        stream.failure = handler.error(stream.idx, chunks.stage, chunks.error, hint=chunks.hint)
        return ""
    out = []
    for chunk in chunks:
        try:
            out.append(stream.encode(chunk))
        except ChunkError as err:
            stream.failure = handler.error(stream.idx, "serialise", err, hint=err.hint)
            break
        stream.sent += 1
    return "".join(out)


def sender(context: Any, indices: list[int]) -> Callable[[dict[int, str], dict[int, str]], set[int]]:
    """How chunks reach the clients: the context's own ``msnb_send_chunks`` or TorchServe's intermediate responses
    (the requests whose streams msnb's front ended are told by handler.cancel)."""
    own = getattr(context, "msnb_send_chunks", None)
    if own is not None:
        return own
    from ts.handler_utils.utils import send_intermediate_predict_response

    cancels, first = Cancels(context, indices), [True]

    def send(pieces: dict[int, str], types: dict[int, str]) -> set[int]:
        for idx, ctype in types.items():
            context.set_response_content_type(idx, ctype)
        ids = {idx: context.request_ids[idx] for idx in pieces}
        send_intermediate_predict_response(pieces, ids, "Intermediate Prediction success", 200, context)
        if first[0]:
            first[0] = False
            time.sleep(FIRST_PIECE_HEAD_START_S)  # the first piece's way out before the generator's next step
        return cancels.ended(pieces) if cancels.paths else set()

    return send
