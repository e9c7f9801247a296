"""The shadow front: one loopback address with the inference key, where each request is answered by one side — status,
headers and bytes as that side sent them, a streamed answer chunk by chunk — while its copy goes to the other side
through the mirror's queue; and a metrics address (Prometheus' counters; status, split and cutover with the front's
own key, msnb.engines.shadow.control). Runs on an event loop (uvloop), its connections parsed by httptools
(msnb.engines.proxy)."""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

from msnb.engines import compare, proxy
from msnb.engines.shadow import control
from msnb.engines.shadow.exchange import Cut, Recorded, Reply, send
from msnb.engines.shadow.mirror import ANSWER_S, QUEUE, Copy, Mirror
from msnb.engines.shadow.pairs import BODY_LIMIT, DiffLog, Judge, other
from msnb.engines.shadow.routes import Route, route
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY, KeyFile, Side
from msnb.engines.shadow.tally import Tally
from msnb.engines.shadow.traffic import Traffic
from msnb.templates.msnb_runtime.api.v1 import refused
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES
from msnb.templates.msnb_runtime.ts.checks import INVALID_KEY, carries_key
from msnb.templates.msnb_runtime.ts.wire import error_reply

LOOPBACK = "127.0.0.1"
PRIMARY_ONLY = (
    "note: {method} {path} and every other call that is not a prediction, an explanation, /v1 or /mcp (ping, "
    "management, metrics) goes to the primary only: it is neither mirrored nor compared"
)


@dataclass(frozen=True)
class Settings:
    """What the command line chose: the addresses, the body limit, the comparison's tolerance, the traffic, the
    differences file and the queue."""

    log: Path
    host: str = LOOPBACK
    port: int = 0
    metrics_port: int = 0
    max_request_size: int = DEFAULT_MAX_BYTES
    tolerance: compare.Tolerance = compare.EXACT
    split: float = 0.0
    cutover_after: int | None = None
    body_limit: int = BODY_LIMIT
    queue: int = QUEUE


class Shadow:
    """``start`` listens on both addresses; ``forward`` answers each request and mirrors it; ``stop`` ends it."""

    def __init__(self, sides: dict[str, Side], settings: Settings, key: KeyFile, control_key: str, say=print):
        self.sides, self.settings, self.key, self.control_key, self.say = sides, settings, key, control_key, say
        self.tally = Tally()
        self.log = DiffLog(settings.log, settings.body_limit)
        self.traffic = Traffic(self.tally, settings.split, settings.cutover_after, self.changed)
        self.judge = Judge(self.tally, self.traffic, self.log, settings.tolerance)
        self.pool = proxy.Pool(Recorded)
        self.mirror = Mirror(self.send_copy, self.judge, self.drop, settings.queue)
        self.servers: list[asyncio.AbstractServer] = []
        self.clients: weakref.WeakSet[proxy.Client] = weakref.WeakSet()  # the open connections, closed at stop
        self.told = False  # whether the front said that other calls go to the primary only
        self.url = self.metrics_url = ""

    async def start(self) -> Shadow:
        loop, limit, host = asyncio.get_running_loop(), self.settings.max_request_size, self.settings.host
        front = await loop.create_server(lambda: self.connection(self.forward, limit), host, self.settings.port)
        metrics = await loop.create_server(
            lambda: self.connection(self.control, control.LIMIT), host, self.settings.metrics_port
        )
        self.servers = [front, metrics]
        shown = f"[{host}]" if ":" in host else host
        self.url, self.metrics_url = (f"http://{shown}:{s.sockets[0].getsockname()[1]}" for s in self.servers)
        self.mirror.start()
        return self

    async def stop(self) -> None:
        """Stop listening, close every connection, end the copies in flight, close the differences file."""
        for server in self.servers:
            server.close()
        for client in list(self.clients):
            if client.transport is not None:
                client.transport.close()
        self.mirror.stop()
        self.pool.close()
        await asyncio.sleep(0)  # the transports' closes run
        self.log.close()

    def connection(self, forward, limit: int) -> proxy.Client:
        client = proxy.Client(forward, limit, refusal)
        self.clients.add(client)
        return client

    # ---------------------------------------------------------------- requests
    async def forward(self, request: proxy.Request, client: proxy.Client) -> None:
        if not carries_key(request.header(b"authorization").decode("latin-1"), self.key.key()):
            reply = refused(request.path, 401, "Invalid API key") if request.path[:4] in ("/v1/", "/mcp") else None
            return client.transport.write(proxy.answer(*(reply or error_reply(*INVALID_KEY))))
        found = route(request.method, request.path, bytes(request.body))
        if found is None:
            return await self.primary_only(request, client)
        self.tally.of(found.model).requests += 1
        role, answered = self.traffic.answerer(found.model), asyncio.get_running_loop().create_future()
        url = request.url.decode("latin-1")
        copy = Copy(
            found, request.method, url, bytes(request.body), other(role), self.wire(request, other(role)), answered
        )
        self.mirror.offer(copy)
        reply = None
        try:
            reply = await self.answer(request, client, role, found)
        finally:
            answered.set_result(reply)

    async def answer(self, request: proxy.Request, client: proxy.Client, role: str, found: Route) -> Reply | None:
        """The answer of ``role`` relayed to ``client`` (the primary's when the candidate gives none); None when none
        came whole."""
        counts, head = self.tally.of(found.model), request.method == "HEAD"
        for asked in (role, PRIMARY) if role == CANDIDATE else (role,):
            try:
                reply = await send(self.pool, self.base(asked, found), self.wire(request, asked), client, head)
            except Cut:  # part of the answer went out: the client sees it cut, as it would from that side
                counts.errors[asked] += 1
                client.transport.close()
                return None
            if reply is not None:
                counts.answered[asked] += 1
                counts.took(asked, reply.seconds)
                return reply if asked == role else None
            counts.errors[asked] += 1
        client.transport.write(proxy.answer(*self.unanswered(role)))
        return None

    async def primary_only(self, request: proxy.Request, client: proxy.Client) -> None:
        if not self.told:
            self.told = True
            self.say(PRIMARY_ONLY.format(method=request.method, path=request.path))
        try:
            got = await send(
                self.pool, self.sides[PRIMARY].url, self.wire(request, PRIMARY), client, request.method == "HEAD"
            )
        except Cut:
            return client.transport.close()
        if got is None:
            client.transport.write(proxy.answer(*self.unanswered(PRIMARY)))

    async def send_copy(self, copy: Copy) -> Reply | None:
        return await send(self.pool, self.base(copy.to, copy.route), copy.wire, None, copy.method == "HEAD", ANSWER_S)

    def base(self, role: str, found: Route) -> str:
        side = self.sides[role]
        return side.api if found.api else side.url

    def wire(self, request: proxy.Request, role: str) -> bytes:
        """The request as it goes to ``role``: that side's key in place of the client's."""
        side = self.sides[role]
        headers = [(k, v) for k, v in request.headers if k.lower() != b"authorization"]
        if side.key is not None:
            headers.append((b"authorization", side.key.header()))
        return replace(request, headers=headers).wire(request.url)

    def unanswered(self, role: str) -> tuple[int, dict, bytes]:
        url = self.sides[role].url
        return error_reply(
            503,
            "ServiceUnavailableException",
            f"The {role} at {url} gave no answer. Hint: is it running? msnb shadow status shows each side's errors.",
        )

    def drop(self, copy: Copy) -> None:
        self.tally.of(copy.route.model).dropped += 1

    def changed(self, event: dict) -> None:
        """A traffic change: written to the differences file and said."""
        self.log.event(event)
        self.say(control.describe(event))

    async def control(self, request: proxy.Request, client: proxy.Client) -> None:
        client.transport.write(proxy.answer(*control.answer(self, request)))


def refusal(status: int, kind: str, message: str, path: str) -> bytes:
    """A request the front refuses before reading it whole (malformed, too large): in OpenAI's or MCP's shape for
    their paths, else TorchServe's; the connection closes."""
    hint = " Hint: send a smaller body, or start msnb shadow with a larger --max-request-size." if status == 413 else ""
    return proxy.answer(*(refused(path, status, message) or error_reply(status, kind, message + hint)), close=True)
