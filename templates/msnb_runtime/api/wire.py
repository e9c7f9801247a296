"""OpenAI's answers on the wire: a Completion as one ``chat.completion`` / ``text_completion`` JSON object, or as
server-sent events (``chat.completion.chunk`` / ``text_completion`` chunks, then ``data: [DONE]``), and the list of
models (those that stream and those that embed). ``Answer`` drives a completion from any source of str pieces (the
engine's stream) in these shapes.

Depends only on the standard library and api.openai, never on msnb.
"""

from __future__ import annotations

import json
from typing import Any

from .openai import CHAT, ApiError, Completion, Request

SSE_TYPE = "text/event-stream"
JSON_TYPE = "application/json"
DONE = b"data: [DONE]\n\n"
OWNER = "msnb"


def event(payload: dict) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _object(completion: Completion, chunk: bool) -> dict:
    chat = completion.request.kind == CHAT
    kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
    return {"id": completion.id, "object": kind, "created": completion.created, "model": completion.request.model}


def whole(completion: Completion) -> dict:
    """The finished completion as one JSON object, with its usage."""
    if completion.request.kind == CHAT:
        message = {"role": "assistant", "content": completion.text, "refusal": None}
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None}
    else:
        choice = {"index": 0, "text": completion.text, "logprobs": None}
    choice["finish_reason"] = completion.finish_reason
    return {**_object(completion, False), "choices": [choice], "usage": completion.usage()}


def chunk(completion: Completion, text: str | None, finish: str | None = None, first: bool = False) -> bytes:
    """One streamed chunk: ``text`` as delta content (None: none), ``finish`` its finish_reason."""
    if completion.request.kind == CHAT:
        delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else {}
        if text is not None and not first:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
    payload = {**_object(completion, True), "choices": [choice]}
    if completion.request.include_usage:
        payload["usage"] = None
    return event(payload)


def usage_chunk(completion: Completion) -> bytes:
    """The last chunk when ``stream_options.include_usage``: no choices, the usage."""
    return event({**_object(completion, True), "choices": [], "usage": completion.usage()})


def error_event(error: ApiError) -> bytes:
    """A failure after the stream began: an event holding OpenAI's error object (the client raises it)."""
    return event(error.body())


def listed(card: dict) -> bool:
    """Whether /v1 serves the model of ``card``: it streams (chat, completions, responses) or embeds (embeddings)."""
    return bool(card.get("streams") or card.get("embeds"))


def models(cards: dict[str, dict], created: int = 0) -> dict:
    """GET /v1/models: the served models /v1 serves (``listed``), by name, from their cards."""
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "created": created, "owned_by": OWNER}
            for n, card in cards.items()
            if listed(card)
        ],
    }


class Pieces:
    """What every protocol's answer to a request holds as the pieces arrive: its Completion, whether it streams,
    whether the source may be closed (``done``: max_tokens reached or a stop string seen), and whether its first
    event went out (``started``)."""

    def __init__(self, request: Request):
        self.completion, self.started = Completion(request), False

    @property
    def stream(self) -> bool:
        return self.completion.request.stream

    @property
    def done(self) -> bool:
        return self.completion.done

    def feed(self, piece: str) -> bytes:
        """The events to send now for ``piece`` (b"" when not streaming, or while the completion holds the text back:
        a stop string may be starting)."""
        text = self.completion.feed(piece)
        return self._delta(text) if self.stream and text else b""

    def close(self) -> bytes:
        """The end of the stream: the held text, then the protocol's closing events; b"" when not streaming."""
        text = self.completion.end()
        return self._end(text) if self.stream else b""

    def _delta(self, text: str) -> bytes:
        """The protocol's events for text released while streaming."""
        raise NotImplementedError

    def _end(self, text: str) -> bytes:
        """The protocol's closing events, after the text the completion held (``text``, maybe "")."""
        raise NotImplementedError


class Answer(Pieces):
    """One chat or text completion's answer as its pieces arrive: ``feed`` each piece (the events to send now when
    streaming), ``close`` when the source ends or ``done``, ``fail`` when it fails; ``body`` is the whole answer when
    not streaming."""

    def _delta(self, text: str) -> bytes:
        return self._send(text)

    def _end(self, text: str) -> bytes:
        """The held text, the finishing chunk (its usage), [DONE]."""
        out = self._send(text) if text else self._send(None) if not self.started else b""
        out += chunk(self.completion, None, self.completion.finish_reason)
        if self.completion.request.include_usage:
            out += usage_chunk(self.completion)
        return out + DONE

    def fail(self, error: ApiError) -> bytes:
        """A failure after the first event: the error event, then [DONE]."""
        return error_event(error) + DONE

    def _send(self, text: str | None) -> bytes:
        out = chunk(self.completion, text, first=not self.started)
        self.started = True
        return out

    def body(self) -> bytes:
        return json.dumps(whole(self.completion)).encode()
