"""Streamed answers on Ray Serve: replicas run a streaming handler's batch and yield each request's chunks as the
handler sends them (the context's ``msnb_send_chunks``, see handler/stream.py), the router passes them on as a
``StreamingResponse`` (``handle.options(stream=True)``); batching is kept (a batched async generator).

A replica item is ``(kind, status, headers, body)``: kind ``whole`` is a complete answer (not streamed, ``body``
its bytes), ``chunk`` a part of a stream (the first one's status and headers are the answer's) whose ``body`` is the
list of pieces the handler sent since the last item: a fast generator's pieces travel together as one Ray object,
and the router sends each piece as its own HTTP chunk, as TorchServe does. A client that goes away marks its
request gone, so the handler stops sending to it and closes a generator no request reads any more. A handler that
sends nothing for longer than responseTimeout ends its streams as TorchServe 0.12 ends them (measured): a request
not yet answered gets the 500 "Worker died.", a started stream is cut (kind ``cut``: no closing chunk, the
connection closed), and the replica asks to be replaced (ray.timeout).
Depends on ray[serve], starlette and the standard library, never on msnb.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse

from ..handler.serving import FIRST_PIECE_HEAD_START_S

STREAM_HEADER = "x-msnb-stream"  # on a whole answer whose handler streams: the router streams the next ones
WHOLE, CHUNK, CUT = "whole", "chunk", "cut"
BEGAN = "began"  # on a batch's queue once its handler has the model (the batch reached the worker)
GIL_SHARE_S = 0.001  # how often a streaming handler's thread lets the replica's event loop take the GIL


def streams(model: Any) -> bool:
    """Whether a loaded model streams: the shared handler's ``streaming`` (a dev entry's current generation's), or
    an own handler whose module sends TorchServe's intermediate responses."""
    entry = model.entry
    current = getattr(entry, "current", None)
    shared = getattr(current.handle if current is not None else entry, "streaming", False)
    return bool(shared or getattr(model, "sends_chunks", False))


def model_lock(model: Any) -> threading.Lock:
    """One batch at a time on a model's context (whole and streamed batches come from two batch queues)."""
    if getattr(model, "msnb_lock", None) is None:
        model.msnb_lock = threading.Lock()
    return model.msnb_lock


def locked(model: Any, call: Callable, *args: Any) -> Any:
    """``call(*args)`` with the model's context to itself (a describe between two batches)."""
    with model_lock(model):
        return call(*args)


def answer_whole(model: Any, requests: list, began: Callable[[], None] = lambda: None) -> list[tuple[int, dict, bytes]]:
    """``model.answer`` for whole answers: a streaming handler's chunks are gathered into its answer, marked with
    STREAM_HEADER so that the router streams the next requests; ``began()`` once the model is this batch's."""
    gathered: dict[int, list[bytes]] = {}
    kinds: dict[int, str] = {}

    def gather(pieces: dict[int, str | bytes], types: dict[int, str]) -> tuple:
        for idx, piece in pieces.items():
            gathered.setdefault(idx, []).append(as_bytes(piece))
        kinds.update(types)
        return ()

    with model_lock(model):
        began()
        model.context.msnb_send_chunks = gather
        replies = model.answer(requests)
    out = []
    for idx, (status, headers, body) in enumerate(replies):
        if idx in gathered:
            headers = {**headers, "content-type": kinds.get(idx, "text/plain"), STREAM_HEADER: "1"}
            status, body = 200, b"".join(gathered[idx]) + body
        out.append((status, headers, body))
    return out


def _answer_sending(model: Any, requests: list, send: Callable, began: Callable) -> list[tuple[int, dict, bytes]]:
    with model_lock(model):
        began()
        model.context.msnb_send_chunks = send
        return model.answer(requests)


async def stream_batch(
    model: Any, requests: list, timeout_s: float | None = None, stalled: Callable[[], tuple] = lambda: (500, {}, b"")
) -> AsyncIterator[list]:
    """The body of a batched generator: ``requests`` are ``(explain, body, headers, gone)``; yields one item per
    request each time the handler sends chunks (None: nothing for that request), then each one's last piece. A
    handler silent for more than ``timeout_s`` once it has the model: ``stalled()`` (the replica's answer to a
    request not yet answered) for each request not started, ``cut`` for each started one, and no more."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()
    send = sender(loop, queue, requests)
    began = functools.partial(loop.call_soon_threadsafe, queue.put_nowait, BEGAN)  # in the handler's thread
    work = asyncio.to_thread(_answer_sending, model, [r[:3] for r in requests], send, began)
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda done: queue.put_nowait(None) or done.cancelled() or done.exception())
    started: set[int] = set()
    ended, bound = False, None  # unbounded until the batch has the model (TorchServe times the worker)
    while not ended:
        try:
            item = await asyncio.wait_for(queue.get(), bound)
        except TimeoutError:
            yield _stalled(requests, started, stalled)
            yield [StopIteration] * len(requests)
            return
        if item is None:
            break
        if item == BEGAN:
            bound = timeout_s
            continue
        pieces, types, ended = coalesce(queue, *item)
        yield [_chunk(idx, pieces, types, started) for idx in range(len(requests))]
    replies = await task
    yield [_last(idx, reply, started) for idx, reply in enumerate(replies)]
    yield [StopIteration] * len(requests)


def sender(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, requests: list) -> Callable:
    """How the handler's thread hands its chunks to the loop that sends them: the first one with a head start (the
    generator pauses while the loop sends it, handler.serving), the next ones letting the loop run at GIL_SHARE_S's
    pace; it answers which requests are gone (their clients left)."""
    given = [0.0]  # when the handler's thread last let the event loop run

    def send(pieces: dict[int, str], types: dict[int, str]) -> set[int]:  # in the handler's thread
        loop.call_soon_threadsafe(queue.put_nowait, (pieces, types))
        if not given[0]:
            time.sleep(FIRST_PIECE_HEAD_START_S)
            given[0] = time.perf_counter()
        elif time.perf_counter() - given[0] >= GIL_SHARE_S:
            time.sleep(0)  # releases the GIL: a fast generator does not starve the loop that sends its chunks
            given[0] = time.perf_counter()
        return {idx for idx, request in enumerate(requests) if request[3].is_set()}

    return send


def coalesce(queue: asyncio.Queue, pieces: dict, types: dict) -> tuple[dict[int, list[bytes]], dict[int, str], bool]:
    """The chunks sent while the last item went out, gathered per request into one item (a fast generator's
    10,000 small chunks travel as a few Ray objects; a slow one's go one by one, never held back); True when the
    handler finished meanwhile."""
    joined = {idx: [as_bytes(piece)] for idx, piece in pieces.items()}
    types = dict(types)
    while not queue.empty():
        item = queue.get_nowait()
        if item is None:
            return joined, types, True
        more, more_types = item
        for idx, piece in more.items():
            joined.setdefault(idx, []).append(as_bytes(piece))
        types.update(more_types)
    return joined, types, False


def _chunk(idx: int, pieces: dict[int, list[bytes]], types: dict[int, str], started: set[int]) -> Any:
    if idx not in pieces:
        return None
    started.add(idx)
    return CHUNK, 200, {"content-type": types.get(idx, "text/plain")}, pieces[idx]


def as_bytes(piece: str | bytes) -> bytes:
    """A chunk as it goes out: the shared handler sends text, TorchServe's intermediate responses bytes."""
    return piece.encode() if isinstance(piece, str) else bytes(piece)


def _stalled(requests: list, started: set[int], stalled: Callable[[], tuple]) -> list[tuple]:
    """Each request's end when its handler stalled: ``cut`` once started, else the replica's answer; all gone."""
    for request in requests:
        request[3].set()  # the stalled handler sends them nothing more
    return [(CUT, 0, {}, []) if idx in started else (WHOLE, *stalled()) for idx in range(len(requests))]


def _last(idx: int, reply: tuple[int, dict, bytes], started: set[int]) -> Any:
    status, headers, body = reply
    if idx not in started:
        return WHOLE, status, headers, body  # nothing was streamed: an ordinary answer (an early error, say)
    return (CHUNK, 200, {}, [body]) if body else None


async def relay(batched: Callable, body: bytes, headers: dict) -> AsyncIterator[tuple]:
    """One request through the batched generator ``batched``; when its reader stops (the client went away), the
    request is marked gone so the handler sends it nothing more."""
    gone = threading.Event()
    try:
        async for item in batched((False, body, headers, gone)):
            if item is not None:
                yield item
    finally:
        gone.set()


class StreamCutError(RuntimeError):
    """Raised into a started streamed answer to end it without its closing chunk (Serve's proxy closes the
    connection), as TorchServe ends a stream whose worker stalled."""


class StreamRoutes:
    """The part of a door (the router's, or a model replica's own) for streaming models: which models stream (asked
    once, corrected by their answers) and their answers passed on as they come."""

    def __init__(self) -> None:
        self.streaming: dict[str, bool] = {}

    async def answer(self, name: str, ask: Callable[[], Awaitable[bool]], items: Callable[[], AsyncIterator]) -> Any:
        """The streamed answer, or None when ``name`` answers whole (the door's own path). ``ask()`` tells whether
        the model streams, ``items()`` runs the prediction (a replica's ``infer_stream``, through a handle or not)."""
        if name not in self.streaming:
            self.streaming[name] = bool(await ask())
        if not self.streaming[name]:
            return None
        replies = items()
        try:
            kind, status, head, first = await replies.__anext__()
        except StopAsyncIteration:
            return Response(b"", status_code=200)
        if kind == WHOLE:
            self.streaming[name] = STREAM_HEADER in head or status >= 400  # an early error: still a streaming model
            return Response(first, status_code=status, headers=head)

        async def rest() -> AsyncIterator[bytes]:
            for piece in first:
                yield piece
            async for kind, _, _, pieces in replies:
                if kind == CUT:  # the handler stalled past responseTimeout: end it as TorchServe does
                    raise StreamCutError(f"{name}: the stream stalled past its responseTimeout")
                for piece in pieces:
                    yield piece

        return StreamingResponse(rest(), status_code=status, headers=head)

    def note(self, name: str, headers: dict) -> dict:
        """A whole answer's headers: one marked STREAM_HEADER makes the next requests of ``name`` stream."""
        if STREAM_HEADER in headers:
            self.streaming[name] = True
            headers = {k: v for k, v in headers.items() if k != STREAM_HEADER}
        return headers
