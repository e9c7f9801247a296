"""The front msnb owns beside TorchServe: OpenAI's /v1 and MCP's /mcp on 127.0.0.1, the same inference key.

TorchServe's Java frontend knows no /v1 or /mcp (its 0.12 OpenAI route is vLLM's engine, not a handler's generator),
so a small threaded HTTP server in the owner's process answers them and forwards each request to TorchServe's
inference API, streaming chunk by chunk (docs/openai-mcp.md). Started and stopped with LocalServer: a thread, no
process, nothing left after stop.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from msnb.engines.torchserve.api_models import TorchServeModels, Upstream
from msnb.errors import ServerError
from msnb.templates import msnb_api_mcp as mcp
from msnb.templates.msnb_api_openai import ROUTES, ApiError, not_found, not_streaming, parse, unauthorised
from msnb.templates.msnb_api_wire import JSON_TYPE, SSE_TYPE, Answer, models

CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class Front:
    """The /v1 and /mcp server of one TorchServe: ``start`` binds a free loopback port, ``stop`` ends it."""

    def __init__(self, models: TorchServeModels, key_header: Callable[[], dict[str, str]]):
        self.models, self.key_header = models, key_header
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Front:
        handler = type("Handler", (FrontHandler,), {"front": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="msnb-api-front", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(10)
        self._server = self._thread = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}" if self._server else ""

    def allowed(self, sent: str) -> bool:
        """Whether the request's Authorization header carries the inference key (always, when auth is off)."""
        want = self.key_header().get("Authorization")
        return want is None or hmac.compare_digest(sent.strip().encode(), want.encode())


class FrontHandler(BaseHTTPRequestHandler):
    """One connection's requests (HTTP/1.1 keep-alive; streamed answers in chunked transfer encoding)."""

    front: Front
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each server-sent event goes out at once

    def log_message(self, *args: Any) -> None:  # no line per request on the owner's stderr
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/mcp":
            return self.reply(*mcp.NOT_ALLOWED)
        if self.path.split("?")[0] != "/v1/models":
            return self.error(ApiError(404, f"Unknown path {self.path}: /v1/models, /v1/chat/completions, "
                                       "/v1/completions and /mcp are served here.", code="not_found"))  # fmt: skip
        if not self.front.allowed(self.headers.get("Authorization", "")):
            return self.error(unauthorised())
        names = [name for name, card in self.front.models.cards().items() if card.get("streams")]
        self.reply(200, {"content-type": JSON_TYPE}, json.dumps(models(names)).encode())

    def do_DELETE(self) -> None:
        self.reply(*mcp.NOT_ALLOWED)

    def do_POST(self) -> None:
        path, body = self.path.split("?")[0], self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path not in ROUTES and path != "/mcp":
            return self.error(ApiError(404, f"Unknown path {path}.", code="not_found"))
        if not self.front.allowed(self.headers.get("Authorization", "")):
            return self.error(unauthorised())
        try:
            self.mcp(body) if path == "/mcp" else self.complete(ROUTES[path], body)
        except ApiError as err:
            self.error(err)
        except ServerError as err:
            self.error(ApiError(503, str(err), "server_error"))
        except CLIENT_GONE:
            self.close_connection = True

    def complete(self, kind: str, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError as err:
            raise ApiError(400, f"The request body is not JSON: {err}.") from None
        request = parse(kind, body)
        card = self.front.models.card(request.model)
        if card is None:
            streaming = [n for n, c in self.front.models.cards().items() if c.get("streams")]
            raise not_found(request.model, streaming)
        if not card.get("streams"):
            raise not_streaming(request.model)
        upstream = self.front.models.open(request.model, raw)
        try:
            self.relay(Answer(request), upstream)
        finally:
            upstream.close()  # max_tokens or a stop string: TorchServe's generator runs on, its chunks dropped

    def relay(self, answer: Answer, upstream: Upstream) -> None:
        if answer.stream:
            self.start_chunked(SSE_TYPE)
        try:
            for piece in upstream.pieces():
                self.chunk(answer.feed(piece)) if answer.stream else answer.feed(piece)
                if answer.done:
                    break
        except ApiError as err:
            if not answer.stream:
                raise
            return self.end_chunked(answer.fail(err))
        if answer.stream:
            return self.end_chunked(answer.close())
        answer.close()
        self.reply(200, {"content-type": JSON_TYPE}, answer.body())

    def mcp(self, raw: bytes) -> None:
        step, models = mcp.step(raw), self.front.models
        if step.kind == "list":
            body = mcp.tools_reply(step.id, [mcp.tool(n, c) for n, c in models.cards().items()])
        elif step.kind == "call":
            card = models.card(step.name)
            if card is None:
                body = mcp.unknown_tool(step.id, step.name, list(models.cards()))
            else:
                try:
                    answer = models.predict(step.name, mcp.sample(card, step.arguments), bool(card.get("streams")))
                    body = mcp.call_reply(step.id, answer)
                except ServerError as err:
                    body = mcp.call_reply(step.id, str(err), failed=True)
        else:
            return self.reply(step.status, {"content-type": JSON_TYPE} if step.body else {}, mcp.encoded(step.body))
        self.reply(200, {"content-type": JSON_TYPE}, mcp.encoded(body))

    # ---------------------------------------------------------------- the wire
    def reply(self, status: int, headers: dict, body: bytes) -> None:
        self.send_response(status)
        for key, value in {**headers, "content-length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def error(self, err: ApiError) -> None:
        self.reply(err.status, {"content-type": JSON_TYPE}, err.encoded())

    def start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        for key, value in (("content-type", content_type), ("cache-control", "no-cache"),
                           ("transfer-encoding", "chunked")):  # fmt: skip
            self.send_header(key, value)
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self, data: bytes) -> None:
        self.chunk(data)
        self.wfile.write(b"0\r\n\r\n")
