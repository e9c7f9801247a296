"""HTTP/1.1 with the least work per request: the connections of both engines' fronts (msnb.engines.ray.ingress,
msnb.engines.torchserve.ingress).

A client's request is parsed (httptools, the C parser uvicorn uses) and handed whole to the front, in order per
connection. The Ray front writes it again to a kept-alive connection of the replica it goes to and passes the answer
back byte for byte as it arrives (``msnb.engines.upstream.Upstream``), its end found by parsing it: a streamed answer keeps every chunk as
the replica sent it, and one cut short (no closing chunk) is cut for the client too. Measured against aiohttp's
server and client doing the same: 0.7-1.0 ms of the front's CPU per prediction with aiohttp, the bulk of the Ray
engine's cost beside the replica's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httptools

from msnb.engines.upstream import Upstream
from msnb.templates.msnb_runtime.ts.checks import too_large  # TorchServe's body limit, as every engine's front keeps it

Refusal = tuple[int, str, str]  # status, error type, message

# Per connection, never passed on (RFC 9110 7.6.1); content-length is written again for the body as read.
HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"content-length",
    b"expect",
}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass
class Request:
    method: str = ""
    url: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    keep_alive: bool = True

    @property
    def path(self) -> str:
        return httptools.parse_url(self.url).path.decode("utf-8", "replace")

    def header(self, name: bytes) -> bytes:
        return next((v for k, v in self.headers if k.lower() == name), b"")

    def wire(self, url: bytes) -> bytes:
        """The request as it goes to a replica, at ``url``."""
        head = [b"%s %s HTTP/1.1" % (self.method.encode(), url)]
        head += [b"%s: %s" % (k, v) for k, v in self.headers if k.lower() not in HOP]
        head.append(b"content-length: %d" % len(self.body))
        return b"\r\n".join(head) + b"\r\n\r\n" + bytes(self.body)


def answer(status: int, headers: dict, body: bytes, close: bool = False) -> bytes:
    """A whole answer the front gives itself (a refusal, an error, a small answer of its own)."""
    head = [b"HTTP/1.1 %d %s" % (status, b"Error" if status >= 400 else b"OK")]
    head += [b"%s: %s" % (k.encode(), str(v).encode()) for k, v in headers.items()]
    head += [b"content-length: %d" % len(body)] + ([b"connection: close"] if close else [])
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _path(url: bytes) -> str:
    """A request's path ("" before its URL is read, or when it is malformed)."""
    try:
        return httptools.parse_url(url).path.decode("utf-8", "replace") if url else ""
    except httptools.HttpParserInvalidURLError:
        return ""


class Client(asyncio.Protocol):
    """One client connection: its requests parsed, handed in order to ``forward(request, client)``; a malformed one,
    or one over ``limit`` bytes (413, which the servers behind check too), gets ``refuse``'s answer (given the status,
    the error type, the message and the request's path) and the connection is closed."""

    def __init__(
        self,
        forward: Callable[[Request, Client], Awaitable[None]],
        limit: int,
        refuse: Callable[[int, str, str, str], bytes],
    ):
        self.forward, self.limit, self.refuse = forward, limit, refuse
        self.parser, self.request, self.queue = httptools.HttpRequestParser(self), Request(), asyncio.Queue()
        self.transport, self.upstream, self.refused = None, None, False
        self.task = asyncio.ensure_future(self.serve())

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.close((400, "BadRequestException", "malformed HTTP request"))

    def on_message_begin(self) -> None:
        self.request = Request()

    def on_url(self, url: bytes) -> None:
        self.request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.request.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.request.method = self.parser.get_method().decode()
        declared = self.request.header(b"content-length")
        if declared.isdigit() and int(declared) > self.limit:
            return self.close(too_large(int(declared), self.limit))
        if self.request.header(b"expect").lower() == b"100-continue":
            self.transport.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        self.request.body += body
        if len(self.request.body) > self.limit:
            self.close(too_large(len(self.request.body), self.limit))

    def on_message_complete(self) -> None:
        if not self.refused:
            self.request.keep_alive = self.parser.should_keep_alive()
            self.queue.put_nowait(self.request)

    async def serve(self) -> None:
        while True:
            request = await self.queue.get()
            await self.forward(request, self)
            if not request.keep_alive:
                return self.transport.close()

    def close(self, refusal: Refusal) -> None:
        """Answer ``refusal`` (status, type, message) and close: nothing more is read from this client."""
        if not self.refused:
            self.refused = True
            self.transport.write(self.refuse(*refusal, _path(self.request.url)))
            self.transport.close()

    def pause_writing(self) -> None:  # the client reads slower than the replica streams
        if self.upstream is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        self.task.cancel()
        if self.upstream is not None:  # the replica sees the client leave (a stream's generator is closed)
            self.upstream.transport.close()


class Pool:
    """Idle kept-alive connections per server URL (``http://host:port``), each a ``protocol`` (``open``: whether it
    may be used again; ``transport``)."""

    def __init__(self, protocol: Callable[[], asyncio.Protocol] = Upstream) -> None:
        self.protocol = protocol
        self.idle: dict[str, list] = {}

    async def take(self, base: str):
        free = self.idle.get(base) or []
        while free:
            upstream = free.pop()
            if upstream.open:
                return upstream
        host, port = base.split("://", 1)[1].rsplit(":", 1)
        _, upstream = await asyncio.get_running_loop().create_connection(self.protocol, host, int(port))
        return upstream

    def give(self, base: str, upstream) -> None:
        if upstream.open:
            self.idle.setdefault(base, []).append(upstream)
        else:
            upstream.transport.close()

    def close(self) -> None:
        """Close every idle connection (the front stops)."""
        for connections in self.idle.values():
            for upstream in connections:
                upstream.transport.close()
        self.idle.clear()
