"""The front msnb owns beside TorchServe: OpenAI's /v1 and MCP's /mcp on 127.0.0.1, the same inference key.

TorchServe's Java frontend knows no /v1 or /mcp (its 0.12 OpenAI route is vLLM's engine, not a handler's generator),
so a small server answers them and forwards each completion to TorchServe's inference API, its events sent as each
of TorchServe's chunks arrives (docs/openai-mcp.md). It runs on an event loop (uvloop where installed) in a thread
of the owner's process, its connections parsed by httptools (msnb.engines.proxy, msnb.engines.upstream):
a completion costs it about 0.3 ms of CPU. What calls TorchServe's management API or waits on a whole prediction
(the models list, MCP) runs on a worker thread, so a stream never waits behind it. Started and stopped with
LocalServer: a thread, no process, nothing left after stop.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Callable

from msnb.engines import proxy
from msnb.engines.torchserve.api_models import TorchServeModels
from msnb.engines.torchserve.sse_stream import SseStream, Unanswered
from msnb.engines.upstream import ChunkedUpstream, post
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.api import embeddings, hosts, mcp
from msnb.templates.msnb_runtime.api.openai import (
    CHALLENGE,
    ROUTES,
    ApiError,
    Request,
    body_of,
    not_found,
    not_streaming,
    unauthorised,
)
from msnb.templates.msnb_runtime.api.v1 import parse, refused
from msnb.templates.msnb_runtime.api.wire import JSON_TYPE, models
from msnb.templates.msnb_runtime.handler.cancel import CANCEL_HEADER, mark, new_id
from msnb.templates.msnb_runtime.ts.checks import carries_key

try:  # the faster loop where it is installed (not on Windows)
    from uvloop import new_event_loop
except ImportError:  # pragma: no cover
    from asyncio import new_event_loop

SERVED = {("GET", "/v1/models"), ("POST", "/mcp"), ("POST", embeddings.ROUTE), *(("POST", path) for path in ROUTES)}
LOOPBACK_ONLY = hosts.AllowedHosts()  # it listens on 127.0.0.1 only: loopback's names and pages
MAX_BODY = 64 << 20  # a request body over this is refused here (LocalServer gives TorchServe's max_request_size)
STOP_TIMEOUT_S = 10.0


class Ingress:
    """The /v1 and /mcp server of one TorchServe: ``start`` binds a free loopback port, ``stop`` ends it."""

    def __init__(self, models: TorchServeModels, key_header: Callable[[], dict[str, str]], limit: int = MAX_BODY):
        self.models, self.key_header, self.limit = models, key_header, limit  # limit: TorchServe's max_request_size
        self.pool = proxy.Pool(ChunkedUpstream)
        self.timeouts: dict[str, float] = {}  # per model: how long TorchServe may take to answer (its responseTimeout)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Future | None = None

    def start(self) -> Ingress:
        ready, failed = threading.Event(), []
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, args=(ready, failed), name="msnb-api-front", daemon=True)
        self._thread.start()
        ready.wait(STOP_TIMEOUT_S)
        if failed or not self.port:
            self.stop()
            raise ServerError(
                f"msnb's /v1 and /mcp front did not start: {failed[0] if failed else 'no port'}.",
                "read the traceback above; a free loopback port is all it needs.",
            )
        return self

    def _run(self, ready: threading.Event, failed: list) -> None:
        try:
            self._loop.run_until_complete(self._serve(ready))
        except Exception as err:  # handed to start, which raises it as a ServerError
            failed.append(err)
            ready.set()
        finally:
            self._loop.close()

    async def _serve(self, ready: threading.Event) -> None:
        """Listen until ``stop``; then close every connection."""
        loop, clients = asyncio.get_running_loop(), weakref.WeakSet()  # the open connections, closed at stop
        self._stopping = loop.create_future()

        def connection() -> proxy.Client:
            client = proxy.Client(self.forward, self.limit, refusal)
            clients.add(client)
            return client

        server = await loop.create_server(connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        await self._stopping
        server.close()
        for client in clients:
            if client.transport is not None:
                client.transport.close()
        self.pool.close()
        await asyncio.sleep(0)  # the transports' closes run

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            if self._stopping is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(lambda: self._stopping.done() or self._stopping.set_result(None))
            self._thread.join(STOP_TIMEOUT_S)
        self._loop = self._thread = self._stopping = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}" if self.port else ""

    def allowed(self, sent: bytes) -> bool:
        """Whether the request's Authorization header carries the inference key (always, when auth is off)."""
        want = self.key_header().get("Authorization")  # Bearer KEY
        return want is None or carries_key(sent.decode("latin-1"), want.partition(" ")[2])

    # ---------------------------------------------------------------- requests
    async def forward(self, request: proxy.Request, client: proxy.Client) -> None:
        """One request's answer to ``client``: OpenAI's error shape for whatever fails."""
        try:
            await self.answer(request, client)
        except ApiError as err:
            client.transport.write(error(err))
        except ServerError as err:  # its cause and hint; the worker's log lines stay in the server's logs
            client.transport.write(error(ApiError(503, err.render(details=False), "server_error")))
        except Exception as err:  # a fault of the front's own: the connection closes, the front runs on
            client.transport.write(
                error(
                    ApiError(
                        500,
                        f"msnb's front failed: {type(err).__name__}: {err}. Hint: "
                        "please report it with the server's logs.",
                        "server_error",
                    )
                )
            )
            client.transport.close()

    async def answer(self, request: proxy.Request, client: proxy.Client) -> None:
        path, method = request.path, request.method
        why = LOOPBACK_ONLY.refusal(*(request.header(h).decode("latin-1") or None for h in (b"host", b"origin")))
        if why is not None:  # another host, or a web page of another origin (DNS rebinding): api.hosts
            return client.transport.write(proxy.answer(*(refused(path, 403, why) or refused("/v1/", 403, why))))
        if path == "/mcp" and method != "POST":
            return client.transport.write(proxy.answer(*mcp.NOT_ALLOWED))
        if (method, path) not in SERVED:
            raise ApiError(
                404,
                f"Unknown path {method} {path}: /v1/models, {', '.join(ROUTES)}, {embeddings.ROUTE} "
                "and /mcp are served here.",
                code="not_found",
            )
        if not self.allowed(request.header(b"authorization")) and path == "/mcp":
            return client.transport.write(proxy.answer(*mcp.unauthorised(unauthorised().message, CHALLENGE)))
        if not self.allowed(request.header(b"authorization")):
            raise unauthorised()
        if path in ROUTES:
            return await self.complete(ROUTES[path], bytes(request.body), client)
        if path == embeddings.ROUTE:
            return client.transport.write(proxy.answer(*await self.embed(bytes(request.body))))
        if path == "/v1/models":
            return client.transport.write(proxy.answer(*await asyncio.to_thread(self.model_list)))
        headers = {name: request.header(name.encode()).decode("latin-1") or None for name in mcp.HEADERS}
        client.transport.write(proxy.answer(*await asyncio.to_thread(self.mcp, bytes(request.body), headers)))

    async def complete(self, kind: str, raw: bytes, client: proxy.Client) -> None:
        """A completion: TorchServe's answer to the request body, relayed as OpenAI's events or one whole answer."""
        request = parse(kind, body_of(raw))
        card = self.models.cached(request.model) or await asyncio.to_thread(self.models.card, request.model)
        if card is None:
            raise not_found(request.model, await asyncio.to_thread(self.models.streaming))
        if not card.get("streams"):
            raise not_streaming(request.model)
        upstream = self.models.client()
        timeout = self.timeouts.get(request.model) or await asyncio.to_thread(upstream.predict_timeout, request.model)
        self.timeouts[request.model] = timeout
        stream_id = new_id()
        headers = {"content-type": JSON_TYPE, CANCEL_HEADER: stream_id, **upstream.keys.header("inference")}
        wire = post(f"/predictions/{request.model}", request.upstream(raw), headers)
        await self.relayed(request, wire, client, (upstream.inference_url, stream_id, timeout))

    async def embed(self, raw: bytes) -> tuple[int, dict, bytes]:
        """/v1/embeddings: each input one prediction (TorchServe batches them), its answer one embedding."""
        request = embeddings.parse(body_of(raw))
        card = await asyncio.to_thread(self.models.card, request.model)
        if card is None:
            cards = await asyncio.to_thread(self.models.cards)
            raise not_found(request.model, [n for n, c in cards.items() if c.get("embeds")], "embedding models")
        if not card.get("embeds"):
            raise embeddings.not_embedding(request.model)
        calls = [asyncio.to_thread(self.models.predict, request.model, text, False) for text in request.inputs]
        body = embeddings.reply(request, await asyncio.gather(*calls))
        return 200, {"content-type": JSON_TYPE}, json.dumps(body).encode()

    async def relayed(self, request: Request, wire: bytes, client: proxy.Client, to: tuple[str, str, float]) -> None:
        """``wire`` to TorchServe (``to``: its URL, the stream's id, the timeout) and its answer to ``client``; once
        more on a fresh connection when a kept-alive one was closed before answering."""
        base, stream_id, timeout = to
        for attempt in (1, 2):
            conn = await self.connect(base)
            relay, client.upstream, again = SseStream(request, conn, client.transport.write), conn, False
            try:
                conn.send(wire, relay.chunk)
                await relay.run(timeout)
            except Unanswered:
                again = attempt == 1 and conn.sends > 1
                if not again:
                    raise
            finally:
                client.upstream = None
                if relay.finished and conn.open:
                    self.pool.give(base, conn)
                else:
                    conn.close()
                    if not again:  # max_tokens, a stop string, an error or the client gone: the generator is told
                        mark(self.models.cancel_dir, stream_id)
            if not again:
                return

    async def connect(self, base: str) -> ChunkedUpstream:
        try:
            return await self.pool.take(base)
        except OSError as err:
            raise ServerError(
                f"TorchServe did not answer at {base}: {err}.",
                "is the server running? server.start() (or %ms_serve) starts it.",
            ) from None

    # ---------------------------------------------------------------- on a worker thread
    def model_list(self) -> tuple[int, dict, bytes]:
        return 200, {"content-type": JSON_TYPE}, json.dumps(models(self.models.cards())).encode()

    def mcp(self, raw: bytes, headers: dict) -> tuple[int, dict, bytes]:
        step = mcp.step(raw, headers)
        if step.kind == "list":
            return mcp.http(step, mcp.tools_reply(step, self.models.cards()))
        if step.kind == "call":
            return mcp.http(step, self.tool_call(step))
        return step.status, {"content-type": JSON_TYPE} if step.body else {}, mcp.encoded(step.body)

    def tool_call(self, step: mcp.Step) -> dict:
        card = self.models.card(step.name)
        if card is None:
            return mcp.unknown_tool(step, list(self.models.cards()))
        problem = mcp.argument_problem(card, step.arguments)
        if problem:
            return mcp.call_reply(step, problem, failed=True)
        try:
            answer = self.models.predict(step.name, mcp.sample(card, step.arguments), bool(card.get("streams")))
            return mcp.call_reply(step, answer)
        except ServerError as err:  # its cause and hint; the worker's log lines stay in the server's logs
            return mcp.call_reply(step, err.render(details=False), failed=True)


def error(err: ApiError) -> bytes:
    return proxy.answer(err.status, err.headers(), err.encoded())


def refusal(status: int, kind: str, message: str, path: str) -> bytes:
    """A request the connection refuses (malformed, too large) in the shape of the protocol its path asks (OpenAI's
    where the path is none of the front's: ``kind``, TorchServe's name for it, is OpenAI's invalid request); the
    connection closes."""
    return proxy.answer(*(refused(path, status, message) or refused("/v1/", status, message)), close=True)
