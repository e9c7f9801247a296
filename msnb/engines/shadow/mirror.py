"""The copies: each mirrored request's copy goes into a bounded queue (a count and a byte budget) that a few workers
empty toward the side that does not answer it. The answer never waits on it: a copy that finds the queue full, or
waits in it longer than it may, is dropped and counted; one its side does not answer in time is that side's error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from msnb.engines.shadow.exchange import Reply
from msnb.engines.shadow.routes import Route

QUEUE = 256  # copies waiting at most (--mirror-queue)
QUEUE_BYTES = 64 << 20  # their bodies' bytes at most
WORKERS = 32  # copies in flight at once
WAIT_S = 2.0  # the longest a copy waits in the queue before it is dropped
ANSWER_S = 120.0  # the longest a side may take to answer a copy (TorchServe's default responseTimeout)


@dataclass
class Copy:
    """One request mirrored: what it asks, the side it goes to (``to``) and its bytes for that side (``wire``), and
    the answer the client got from the other side (``answered``: set once that answer has ended, None when there
    was none)."""

    route: Route
    method: str
    url: str
    body: bytes
    to: str
    wire: bytes
    answered: asyncio.Future
    queued: float = field(default_factory=time.monotonic)


class Mirror:
    """The queue and its workers: ``send(copy)`` asks the copy's side, ``judge(copy, answered, copied)`` gets each
    pair once both answers are in (either None: that side gave none), ``dropped(copy)`` each copy not sent."""

    def __init__(
        self, send: Callable[[Copy], Awaitable[Reply | None]], judge: Callable, dropped: Callable, depth: int = QUEUE
    ):
        self.send, self.judge, self.dropped = send, judge, dropped
        self.queue: asyncio.Queue[Copy] = asyncio.Queue(depth)
        self.bytes = 0
        self.workers: list[asyncio.Task] = []

    def start(self) -> None:
        self.workers = [asyncio.ensure_future(self.work()) for _ in range(WORKERS)]

    def offer(self, copy: Copy) -> None:
        """Queue ``copy``, or drop it (counted) when the queue is full: never waits."""
        if self.bytes + len(copy.wire) > QUEUE_BYTES or self.queue.full():
            return self.dropped(copy)
        self.bytes += len(copy.wire)
        self.queue.put_nowait(copy)

    async def work(self) -> None:
        while True:
            copy = await self.queue.get()
            self.bytes -= len(copy.wire)
            if time.monotonic() - copy.queued > WAIT_S:
                self.dropped(copy)
                continue
            try:
                copied = await self.send(copy)
            except Exception:  # a side that broke its answer midway (exchange.Cut), or a fault: no answer
                copied = None
            copy.answered.add_done_callback(lambda done, c=copy, r=copied: self.judge(c, done.result(), r))

    def stop(self) -> None:
        for task in self.workers:
            task.cancel()
        self.workers = []
