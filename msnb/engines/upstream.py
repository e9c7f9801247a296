"""The ingresses' kept-alive connections to the servers behind them (a Ray replica's own port, TorchServe's inference
API), one kind for both engines: each request written in one write, the answer parsed by httptools (the C parser
uvicorn uses) as its bytes arrive. ``Upstream`` passes the bytes on to the client as they come (Ray's ingress and
``msnb shadow``: the answer byte for byte, its end found by parsing it); ``ChunkedUpstream`` reads the status and
headers and hands each HTTP chunk on whole the moment it is complete (TorchServe's ingress: TorchServe sends each
intermediate response, one piece, as one chunk). ``msnb.engines.proxy.Pool`` keeps them per server.

A threaded server with ``http.client`` cost the TorchServe ingress 1.6 ms of a stream's first chunk on an idle machine
(time stamps inside it, docs/openai-mcp.md#measured): parsing the request and the answer's headers with ``email``, a
thread's wake-up per read. Nothing here is an engine's: the key and the paths come from the caller.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Protocol

import httptools

Chunks = Callable[[bytes], None]


class Client(Protocol):
    """The client connection an answer passes on to (``msnb.engines.proxy.Client``): what it is written to, and the
    upstream serving it now (told so that a slow reader pauses the upstream, and a client that leaves ends it)."""

    transport: asyncio.Transport
    upstream: Upstream | None


def post(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """A POST as it goes on the wire (HTTP/1.1, kept alive)."""
    head = [
        f"POST {path} HTTP/1.1",
        "host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in headers.items()),
        f"content-length: {len(body)}",
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Connection(asyncio.Protocol):
    """One kept-alive connection, its answers parsed as they arrive: ``ended`` is settled True at an answer's end
    (False when the connection ended first); ``open``: whether it may carry another request."""

    def __init__(self) -> None:
        self.parser, self.transport, self.open = httptools.HttpResponseParser(self), None, True
        self.ended: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()

    def close(self) -> None:
        """Done before the answer's end: the connection goes (the server sees the client leave)."""
        self.open = False
        self.transport.close()

    def on_message_complete(self) -> None:
        self.open = self.open and self.parser.should_keep_alive()
        settle(self.ended, True)

    def connection_lost(self, exc) -> None:
        self.open = False
        settle(self.ended, False)


class Upstream(Connection):
    """A kept-alive connection to a replica; ``exchange`` sends one request and passes its answer on to a client."""

    def __init__(self) -> None:
        super().__init__()
        self.client: Client | None = None
        self.got, self.head = False, False

    async def exchange(self, wire: bytes, client: Client, head: bool) -> bool:
        """True once the whole answer went to ``client``; False when the connection ended first (``got``: whether
        any of the answer came)."""
        self.ended, self.client, self.got, self.head = asyncio.get_running_loop().create_future(), client, False, head
        client.upstream = self
        try:
            self.transport.write(wire)
            return await self.ended
        finally:
            client.upstream = self.client = None

    def data_received(self, data: bytes) -> None:
        self.got = True
        if self.client is not None:
            self.client.transport.write(data)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        if self.head:  # a HEAD answer has no body whatever its content-length says
            self.on_message_complete()


class ChunkedUpstream(Connection):
    """A kept-alive connection to TorchServe; ``send`` one request, await ``head`` (its status and headers), then
    ``ended``: each HTTP chunk of a 200 answer goes to ``on_chunk`` as it completes (a body that is not chunked, as
    its bytes come), an error answer's body is kept in ``body``."""

    def __init__(self) -> None:
        super().__init__()
        self.status, self.headers, self.body, self.chunk = 0, {}, bytearray(), bytearray()
        self.on_chunk: Chunks | None = None
        self.sends = 0  # requests written: more than one, a kept-alive connection TorchServe may have closed meanwhile
        self.head: asyncio.Future | None = None

    def send(self, wire: bytes, on_chunk: Chunks) -> None:
        loop = asyncio.get_running_loop()
        self.head, self.ended = loop.create_future(), loop.create_future()
        self.status, self.headers, self.on_chunk = 0, {}, on_chunk
        self.sends += 1
        self.body.clear()
        self.chunk.clear()
        self.transport.write(wire)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def decoded(self) -> Any:
        """The kept body as JSON when it parses, else as text."""
        try:
            return json.loads(self.body)
        except ValueError:
            return self.body.decode("utf-8", "replace")

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        settle(self.head, True)

    def on_body(self, data: bytes) -> None:
        if self.status != 200:  # an error answer: read whole
            self.body.extend(data)
        elif self.headers.get("transfer-encoding") == "chunked":
            self.chunk.extend(data)
        elif self.on_chunk is not None:  # a body that is not chunked: its bytes as they come
            self.on_chunk(data)

    def on_chunk_complete(self) -> None:
        if self.chunk and self.on_chunk is not None:
            data = bytes(self.chunk)
            self.chunk.clear()
            self.on_chunk(data)

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        settle(self.head, False)


def settle(future: asyncio.Future | None, value: bool) -> None:
    if future is not None and not future.done():
        future.set_result(value)
