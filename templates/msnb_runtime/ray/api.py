"""OpenAI's /v1 and MCP's /mcp in the Ray router, over the model applications' replicas (the protocols of
msnb_api_*); and /v1 for one model in a replica of its own (``PerModelRoute``: where the local front sends a completion).

A completion streams the pieces a replica's handler sends (ray.streaming's items: each piece as the handler sent it),
closed early once max_tokens or a stop string ends it (the replica then closes the generator no request reads). A
model's API card (msnb_api.json in its folder, and whether it streams) comes from one of its replicas, kept for
CARD_TTL_S. The inference key as OpenAI's 401 and MCP's bearer: the router's key opens every model; on a shared Ray
(`msnb ray up`) each process's models have a key of their own, and that key opens its models (a card carries its
model's key hashed, ``KEY_FIELD``): the listings and calls answer with those models only. Depends on ray[serve],
starlette and the standard library, never on msnb.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ray import serve
from starlette.responses import Response, StreamingResponse

from ..api import embeddings, mcp
from ..api.openai import CHALLENGE, ROUTES, ApiError, body_of, not_found, not_streaming, unauthorised, upstream_error
from ..api.v1 import answer, parse
from ..api.wire import JSON_TYPE, SSE_TYPE, models
from ..handler.names import API_CARD
from ..ts.checks import refused
from .streaming import CUT, WHOLE, streams

CARD_TTL_S = 10.0  # a card older than this is read again (in the background: a replica call costs ms)
KEY_FIELD = "key_sha256"  # a card's model's key, hashed: which key opens it (the key itself never leaves its replica)
# The models the request's key opens, when it is a model's key and not the router's (None: every model). Set per
# request by ApiRoutes.answer; asyncio gives each request's task its own value.
_OPENED: ContextVar[frozenset[str] | None] = ContextVar("msnb_opened", default=None)
ERROR_KEYS = {"error", "hint", "stage", "type"}  # the shared handler's error line ending a stream


def json_reply(status: int, value: Any) -> Response:
    return Response(json.dumps(value).encode(), status_code=status, media_type=JSON_TYPE)


def error_reply(err: ApiError) -> Response:
    return Response(err.encoded(), status_code=err.status, headers=err.headers())


def reply(answer: tuple[int, dict, bytes]) -> Response:
    status, headers, body = answer
    return Response(body, status_code=status, headers=headers)


def error_line(text: str) -> dict | None:
    """The handler's error line at the end of a text stream ("\\n" + JSON + "\\n"), else None."""
    if not text.rstrip().endswith("}"):
        return None
    try:
        value = json.loads(text[text.rfind("\n{", 0, len(text) - 1) + 1 :])
    except ValueError:
        return None
    return value if isinstance(value, dict) and ERROR_KEYS <= set(value) else None


class ApiRoutes:
    """The router's /v1 and /mcp: ``router`` gives the model applications' handles (``app_handle``) and the key."""

    def __init__(self, router: Any):
        self.router = router
        self.cards: dict[str, tuple[float, dict]] = {}  # name -> (when read, card)
        self.reading: set[str] = set()  # cards being read again

    async def answer(self, request: Any, path: str, headers: dict) -> Response:
        if request.method in ("GET", "DELETE") and path == "/mcp":
            return Response(b"", status_code=405, headers={"allow": "POST"})
        if path not in ("/v1/models", "/mcp", embeddings.ROUTE) and path not in ROUTES:
            return error_reply(ApiError(404, f"Unknown path {path}.", code="not_found"))
        if refused(headers, self.router.key):
            opened = await self.opened_by(headers)  # a model's own key (a shared Ray's user): its models only
            if not opened:
                refusal = unauthorised(getattr(self.router, "key_hint", None))
                return reply(mcp.unauthorised(refusal.message, CHALLENGE)) if path == "/mcp" else error_reply(refusal)
            _OPENED.set(opened)
        try:
            if path == "/v1/models":
                return json_reply(200, models(await self.all_cards()))
            body = await request.body()
            if path == "/mcp":
                return reply(await self.mcp(body, {name: headers.get(name) for name in mcp.HEADERS}))
            if path == embeddings.ROUTE:
                return json_reply(200, await self.embed(body))
            return await self.complete(ROUTES[path], body)
        except ApiError as err:
            return error_reply(err)
        except Exception as err:  # the model's application went (deleted meanwhile): Serve's error, in OpenAI's shape
            said = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""  # never a remote traceback
            return error_reply(
                ApiError(
                    503,
                    f"{type(err).__name__}: {said}. Hint: is the model still served? GET "
                    "/v1/models lists the models that stream or embed.",
                    "server_error",
                )
            )

    async def opened_by(self, headers: dict) -> frozenset[str]:
        """The models whose own key the request carries (none: the key opens nothing here)."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return frozenset()
        digest = key_digest(token.strip())
        cards = await self.all_cards(every=True)
        return frozenset(n for n, c in cards.items() if hmac.compare_digest(str(c.get(KEY_FIELD)), digest))

    async def card(self, name: str) -> dict | None:
        """``name``'s card: the one kept, read again in the background once older than CARD_TTL_S (no replica call
        on a request's way to its first token); None when there is no such model, or the request's key does not
        open it."""
        opened = _OPENED.get()
        if opened is not None and name not in opened:
            return None
        kept = self.cards.get(name)
        if kept is None:
            return await self.read_card(name)
        if time.monotonic() - kept[0] >= CARD_TTL_S and name not in self.reading:
            self.reading.add(name)
            task = asyncio.ensure_future(self.read_card(name))
            task.add_done_callback(lambda _: self.reading.discard(name))
        return kept[1]

    async def read_card(self, name: str) -> dict | None:
        handle = self.router.app_handle(name)
        if handle is None:
            self.cards.pop(name, None)
            return None
        try:
            card = await handle.streams.remote(True)
        except Exception:  # deleted meanwhile, or an application that is not a model (the router itself)
            self.cards.pop(name, None)
            return None
        self.cards[name] = (time.monotonic(), card)
        return card

    async def all_cards(self, every: bool = False) -> dict[str, dict]:
        """The served models' cards: those the request's key opens (``every``: all of them); a replica set's
        application stands for its models."""
        own, sets = serve.get_replica_context().app_name, getattr(self.router, "sets", {})
        apps = {n for n in serve.status().applications if n != own and n not in sets.values()}  # a set: its models
        opened = None if every else _OPENED.get()
        names = sorted(n for n in apps | set(sets) if opened is None or n in opened)
        token = _OPENED.set(None)  # (the names are chosen: read each card as the router)
        try:
            return {n: card for n in names if (card := await self.card(n)) is not None}
        finally:
            _OPENED.reset(token)

    async def complete(self, kind: str, raw: bytes) -> Response:
        request = parse(kind, body_of(raw))
        card = await self.card(request.model)
        if card is None:
            cards = await self.all_cards()
            raise not_found(request.model, [n for n, c in cards.items() if c.get("streams")])
        if not card.get("streams"):
            raise not_streaming(request.model)
        out, pieces = answer(request), await self.pieces(request.model, request.upstream(raw))
        if not out.stream:
            await self.drain(out, pieces)
            return Response(out.body(), media_type=JSON_TYPE)
        return StreamingResponse(self.events(out, pieces), media_type=SSE_TYPE, headers={"cache-control": "no-cache"})

    async def embed(self, raw: bytes) -> dict:
        """/v1/embeddings: each input one prediction (the replicas batch them), its answer one embedding."""
        request = embeddings.parse(body_of(raw))
        card = await self.card(request.model)
        if card is None:
            cards = await self.all_cards()
            raise not_found(request.model, [n for n, c in cards.items() if c.get("embeds")], "embedding models")
        if not card.get("embeds"):
            raise embeddings.not_embedding(request.model)
        calls = [self.predict(request.model, json.dumps(text).encode(), False) for text in request.inputs]
        return embeddings.reply(request, await asyncio.gather(*calls))

    async def pieces(self, name: str, raw: bytes) -> AsyncIterator[str]:
        """The model's str pieces for request body ``raw``; an error answer before them raises ApiError at once."""
        replies = (
            self.router.app_handle(name).options(stream=True).infer_stream.remote(raw, {"content-type": JSON_TYPE})
        )
        try:
            kind, status, head, first = await replies.__anext__()
        except StopAsyncIteration:
            first, kind, status, head = [], "", 200, {}
        if kind == WHOLE:
            raise upstream_error(status if status >= 400 else 500, _decoded(first))
        if "jsonl" in head.get("content-type", ""):
            raise ApiError(
                400,
                "The model streams JSON values, not text: /v1 needs a generator that yields str "
                "pieces. Hint: make postprocess return a str per step.",
                param="model",
            )
        return _texts(first, replies)

    async def drain(self, answer: Any, pieces: AsyncIterator[str]) -> None:
        try:
            async for piece in pieces:
                answer.feed(piece)
                if answer.done:
                    break
        finally:
            await pieces.aclose()  # closes the replica's stream: its generator stops
        answer.close()

    async def events(self, answer: Any, pieces: AsyncIterator[str]) -> AsyncIterator[bytes]:
        try:
            async for piece in pieces:
                out = answer.feed(piece)
                if out:
                    yield out
                if answer.done:
                    break
        except ApiError as err:
            yield answer.fail(err)
            return
        finally:
            await pieces.aclose()
        yield answer.close()

    async def mcp(self, raw: bytes, headers: dict) -> tuple[int, dict, bytes]:
        step = mcp.step(raw, headers)
        if step.kind == "reply":
            return step.status, {"content-type": JSON_TYPE} if step.body else {}, mcp.encoded(step.body)
        if step.kind == "list":
            return mcp.http(step, mcp.tools_reply(step, await self.all_cards()))
        return mcp.http(step, await self.tool_call(step))

    async def tool_call(self, step: mcp.Step) -> dict:
        card = await self.card(step.name)
        if card is None:
            return mcp.unknown_tool(step, list(await self.all_cards()))
        problem = mcp.argument_problem(card, step.arguments)
        if problem:
            return mcp.call_reply(step, problem, failed=True)
        sample = json.dumps(mcp.sample(card, step.arguments)).encode()
        try:
            answer = await self.predict(step.name, sample, bool(card.get("streams")))
        except ApiError as err:  # its cause and hint, as the model's error line says them
            return mcp.call_reply(step, err.message, failed=True)
        return mcp.call_reply(step, answer)

    async def predict(self, name: str, body: bytes, streams: bool) -> Any:
        """One prediction: the decoded answer; a streaming model's joined text."""
        if streams:
            return "".join([piece async for piece in await self.pieces(name, body)])
        status, _, answer = await self.router.app_handle(name).infer.remote(False, body, {"content-type": JSON_TYPE})
        if status >= 400:
            raise upstream_error(status, _decoded(answer))
        return _decoded(answer)


async def _texts(first: list[bytes], replies: Any) -> AsyncIterator[str]:
    """Each piece as text; the handler's error line raises ApiError; closing it cancels the replica's stream."""
    try:
        batches = [first]
        while batches:
            for piece in batches.pop():
                text = bytes(piece).decode("utf-8", "replace")
                failure = error_line(text)
                if failure is not None:
                    raise upstream_error(500, failure)
                if text:
                    yield text
            async for kind, _, _, more in replies:
                if kind == CUT:  # the handler sent nothing for its responseTimeout
                    raise upstream_error(500, {"message": "Worker died."})
                batches.append(more)
                break
    finally:
        replies.cancel()


class PerModelRoute:
    """A model replica as ApiRoutes' ``router``: OpenAI's API for its own model, through the calls ApiRoutes makes on
    a Serve handle (the local front sends a model's completions to one of its replicas: no router hop)."""

    def __init__(self, replica: Any):
        self.replica = replica

    @property
    def key(self) -> str | None:
        return self.replica.ingress_config.key

    @property
    def key_hint(self) -> str | None:
        return self.replica.ingress_config.key_hint

    def app_handle(self, name: str) -> Any:
        return OwnHandle(self.replica) if name == self.replica.model.name else None


class OwnHandle:
    """The replica's own ``streams``, ``infer`` and ``infer_stream`` as a handle's ``.remote`` calls."""

    def __init__(self, replica: Any):
        self.streams = Call(lambda card=False: done(replica.streams(card)))
        self.infer = Call(replica.infer)
        self.infer_stream = Call(lambda body, headers: Replies(replica.infer_stream(body, headers)))

    def options(self, **_: Any) -> OwnHandle:
        return self


class Call:
    def __init__(self, call: Any):
        self.remote = call


async def done(value: Any) -> Any:
    return value


class Replies:
    """An async generator as a Serve response generator: read item by item, then ``cancel()`` (closes it)."""

    def __init__(self, items: Any):
        self.items = items

    def __aiter__(self) -> Replies:
        return self

    async def __anext__(self) -> Any:
        return await self.items.__anext__()

    def cancel(self) -> None:
        asyncio.ensure_future(self.items.aclose())


def _decoded(body: Any) -> Any:
    raw = b"".join(body) if isinstance(body, list) else body
    try:
        return json.loads(raw)
    except (ValueError, TypeError):
        return bytes(raw).decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw


def model_card(model: Any, key: str | None = None) -> dict:
    """A replica's model as /v1 and /mcp show it: its folder's card, whether it streams (asked of the loaded
    handler, so that an own handler sending TorchServe's intermediate responses streams too) and its ingress config's
    ``key``, hashed (``KEY_FIELD``)."""
    folder = Path(model.context.system_properties.get("model_dir") or ".")
    path = folder / API_CARD
    card = mcp.read_card(path.read_text() if path.is_file() else None, model.name)
    card["streams"] = streams(model)
    card[KEY_FIELD] = key_digest(key)
    return card


def key_digest(key: str | None) -> str | None:
    """A key as a card carries it: its SHA-256 (None without a key)."""
    return hashlib.sha256(key.encode()).hexdigest() if key else None
