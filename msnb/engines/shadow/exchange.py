"""One request to one side and its answer, recorded as it arrives: relayed byte for byte to the client when that side
answers it (status, headers and each chunk as the server sent them, ``msnb.engines.upstream.Upstream``), read whole
when it is the copy; either way its status, its body (a streamed answer's pieces joined) and how long it took."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from msnb.engines import proxy
from msnb.engines.upstream import Upstream


@dataclass(frozen=True)
class Reply:
    """A whole answer: its status, its body (de-chunked) and the seconds from the request's first byte out to the
    answer's last byte in."""

    status: int
    body: bytes
    seconds: float


class Recorded(Upstream):
    """A kept-alive connection to one side that keeps each answer's status and body as they pass."""

    def __init__(self) -> None:
        super().__init__()
        self.status, self.body = 0, bytearray()

    async def exchange(self, wire: bytes, client: proxy.Client | None, head: bool) -> bool:
        """``wire`` sent and its answer read: relayed to ``client`` as it comes, or to no one (a copy)."""
        self.status, self.body = 0, bytearray()
        if client is not None:
            return await super().exchange(wire, client, head)
        self.ended, self.got, self.head = asyncio.get_running_loop().create_future(), False, head
        self.transport.write(wire)
        return await self.ended

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.body += body


class Cut(Exception):
    """The answer ended midway: part of it went to the client already (its connection must close)."""


async def send(
    pool: proxy.Pool,
    base: str,
    wire: bytes,
    client: proxy.Client | None = None,
    head: bool = False,
    timeout: float | None = None,
) -> Reply | None:
    """``wire`` to the server at ``base`` (once more on a fresh connection when one ends before any answer: a
    kept-alive connection the server closed meanwhile); its Reply, None when it gave none (refused, closed, or not
    within ``timeout``), ``Cut`` when it stopped midway."""
    for _ in range(2):
        start = time.perf_counter()
        try:
            conn = await pool.take(base)
        except OSError:
            return None
        try:
            asked = conn.exchange(wire, client, head)
            done = await (asked if timeout is None else asyncio.wait_for(asked, timeout))
        except TimeoutError:
            conn.transport.close()
            return None
        if done:
            pool.give(base, conn)
            return Reply(conn.status, bytes(conn.body), time.perf_counter() - start)
        conn.transport.close()
        if conn.got:
            raise Cut()
    return None
