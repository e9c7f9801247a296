"""One completion's answer as TorchServe's chunks arrive (msnb.engines.torchserve.ingress): each chunk's text pieces fed
to OpenAI's ``Answer``, a stream's events written to the client the moment they exist (its head with the first, in
one write), a whole answer written at the end. Once TorchServe said 200 a stream's head may be out, so what fails
after that reaches a streaming client as OpenAI's error event; before it, and for a whole answer, as an HTTP error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from msnb.engines import proxy
from msnb.engines.chunks import ChunkReader
from msnb.engines.upstream import ChunkedUpstream
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.api.openai import ApiError, Request, upstream_error
from msnb.templates.msnb_runtime.api.v1 import answer
from msnb.templates.msnb_runtime.api.wire import JSON_TYPE, SSE_TYPE

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    % SSE_TYPE.encode()
)
END = b"0\r\n\r\n"
JSON_LINES = ApiError(
    400,
    "The model streams JSON values, not text: /v1 needs a generator that yields str pieces. "
    "Hint: make postprocess return a str per step.",
    param="model",
)


class Unanswered(ServerError):
    """TorchServe closed the connection before its answer began (a kept-alive connection it had closed: try anew)."""


def frame(data: bytes) -> bytes:
    """``data`` as one HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


class SseStream:
    """TorchServe's answer on ``conn`` to the client's ``write``: ``chunk`` is the connection's chunk callback,
    ``run`` waits for the end. ``finished``: TorchServe's answer was read to its end (the connection may be kept)."""

    def __init__(self, request: Request, conn: ChunkedUpstream, write: Callable[[bytes], None]):
        self.answer, self.conn, self.write = answer(request), conn, write
        self.reader: ChunkReader | None = None
        self.started = self.finished = False  # the stream's head went out; TorchServe's answer read whole
        self.enough = False  # the answer is complete before TorchServe's end (max_tokens, a stop string, refused)
        self.problem: ApiError | None = None
        self.seen = 0  # chunks so far: a wait without one is TorchServe silent

    def chunk(self, data: bytes) -> None:
        self.seen += 1
        if self.enough:
            return
        if self.reader is None:
            self.reader = ChunkReader(self.conn.header("content-type"))
            if self.reader.jsonl:
                return self.stop(JSON_LINES)
        self.feed(self.reader.feed(data))

    def feed(self, pieces: Iterable[str]) -> None:
        for piece in pieces:
            self.send(self.answer.feed(piece))
            if self.answer.done:
                return self.stop()

    def stop(self, problem: ApiError | None = None) -> None:
        """The answer needs no more of TorchServe's: its connection goes (the front tells the worker to stop)."""
        self.enough, self.problem = True, problem
        self.conn.close()

    def send(self, events: bytes) -> None:
        if events and self.answer.stream:
            self.write(self.head() + frame(events))

    def head(self) -> bytes:
        started, self.started = self.started, True
        return b"" if started else HEAD

    async def run(self, timeout: float) -> None:
        """Wait for TorchServe's answer and write the client's; an error before a stream's first event, or in a
        whole answer, raises ApiError."""
        if not await asyncio.wait_for(self.conn.head, timeout):
            raise Unanswered(
                "TorchServe closed the connection before answering.",
                "read the server's logs (server.logs()): its worker may have died.",
            )
        if self.conn.status != 200:
            self.finished = await asyncio.wait_for(self.conn.ended, timeout)
            raise upstream_error(self.conn.status, self.conn.decoded())
        try:
            await self.body(timeout)
        except ApiError as err:
            if not self.answer.stream:
                raise
            return self.write(self.head() + frame(self.answer.fail(err)) + END)
        if self.answer.stream:
            return self.write(self.head() + frame(self.answer.close()) + END)
        self.answer.close()
        self.write(proxy.answer(200, {"content-type": JSON_TYPE}, self.answer.body()))

    async def body(self, timeout: float) -> None:
        """Until TorchServe's answer ends (or is no longer needed); its last pieces fed, its error line raised."""
        while not self.conn.ended.done():
            seen = self.seen
            await asyncio.wait([self.conn.ended], timeout=timeout)
            if not self.conn.ended.done() and self.seen == seen:
                raise ApiError(504, f"TorchServe sent nothing for {timeout:.0f} s.", "server_error")
        if self.problem is not None:
            raise self.problem
        if self.enough:
            return
        if not self.conn.ended.result():
            raise ApiError(
                502, "TorchServe ended the answer midway. Hint: read the server's logs (server.logs()).", "server_error"
            )
        self.finished = True
        self.reader = self.reader or ChunkReader(self.conn.header("content-type"))
        self.feed(self.reader.close())
        if self.reader.error is not None:
            raise upstream_error(500, self.reader.error)
