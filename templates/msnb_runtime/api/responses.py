"""OpenAI's Responses API (``POST /v1/responses``) over a streaming model: a request becomes the sample its chat
messages stand for, a generator's str pieces one ``response`` object or the API's semantic events.

Stateless, as ``store: false`` is: nothing is kept, so ``previous_response_id`` (and ``conversation``) are refused
with a hint to send the earlier turns in ``input``. The sample ``preprocess`` receives is the request body with
``messages`` added: ``instructions`` as a system message, then ``input`` (a string: one user message; a list: its
messages, their text parts joined). ``max_output_tokens`` closes the stream after that many pieces (``status:
"incomplete"``, ``incomplete_details.reason: "max_output_tokens"``). A failure after the first event ends the stream
with the API's ``error`` event, then ``response.failed``. Depends only on the standard library and api.openai.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from .openai import (
    REFUSED,
    RESPONSES,
    ApiError,
    Completion,
    Request,
    max_tokens,
    model_of,
    refuse_unsupported,
    stream_of,
)
from .wire import Pieces

STATELESS = (
    "msnb keeps no responses (each request is answered as with `store: false`). Hint: leave `{}` out and "
    "send the earlier turns in `input`, as a list of messages."
)
# Fields of the Responses API whose answer msnb cannot shape, beside chat's (REFUSED): the values it allows.
REFUSED_HERE: dict[str, tuple[Any, ...]] = {
    **REFUSED,
    "tool_choice": (None, "none", "auto"),  # "auto" with no tools: no tool is called
    "background": (None, False),
    "reasoning": (None,),
    "include": (None, []),
    "prompt": (None,),
    "text": (None, {"format": {"type": "text"}}),
}
TEXT_PARTS = ("input_text", "output_text", "text")


def parse(body: Any) -> Request:
    """The Responses request from its decoded JSON body; ApiError (400) naming a bad or refused field."""
    model = model_of(body)
    for name in ("previous_response_id", "conversation"):
        if body.get(name) is not None:
            raise ApiError(400, f"`{name}` is not supported here: " + STATELESS.format(name), param=name)
    refuse_unsupported(body, REFUSED_HERE)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "`instructions` must be a string.", param="instructions")
    system = [{"role": "system", "content": instructions}] if instructions else []
    sample = {**body, "messages": system + messages(body.get("input"))}
    limit = max_tokens(body, ("max_output_tokens",))
    return Request(RESPONSES, model, sample, stream_of(body), limit)


def messages(given: Any) -> list[dict]:
    """``input`` as chat messages: a string is one user message; a list's messages keep their role."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise ApiError(400, "`input` must be a string or a non-empty list of messages.", param="input")
    return [_message(item) for item in given]


def _message(item: Any) -> dict:
    if not isinstance(item, dict) or item.get("type", "message") != "message" or not isinstance(item.get("role"), str):
        kind = item.get("type") if isinstance(item, dict) else type(item).__name__
        raise ApiError(
            400,
            f"`input` holds a {kind!r} item: msnb answers messages with text only. Hint: send "
            'messages ({"role": ..., "content": ...}).',
            param="input",
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": item["role"], "content": content}
    parts = content if isinstance(content, list) else [None]
    if not all(isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str) for p in parts):
        raise ApiError(
            400,
            "A message's `content` must be a string or a list of text parts (input_text): msnb's "
            "models answer text. Hint: send the text alone.",
            param="input",
        )
    return {"role": item["role"], "content": "".join(p["text"] for p in parts)}


def usage(completion: Completion) -> dict:
    """Output tokens: the pieces read. Input tokens: 0, the handler's tokenizer is not msnb's to see."""
    return {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion.pieces,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": completion.pieces,
    }


def event(kind: str, payload: dict) -> bytes:
    """One server-sent event of the Responses API: its type as the event's name and in its JSON."""
    data = json.dumps({"type": kind, **payload}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


class ResponseAnswer(Pieces):
    """One Responses request's answer as its pieces arrive, with wire.Answer's interface: ``feed`` each piece (the
    events to send now when streaming), ``close`` at the end, ``fail`` on a failure; ``body`` the whole answer."""

    def __init__(self, request: Request):
        super().__init__(request)
        self.sequence, self.id, self.item = 0, f"resp_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _delta(self, text: str) -> bytes:
        return self._open() + self._send("response.output_text.delta", self._at(delta=text, logprobs=[]))

    def _end(self, text: str) -> bytes:
        """The held text, then the done events and ``response.completed`` (or ``.incomplete``)."""
        out = self._delta(text) if text else self._open()
        item = self.message()
        out += self._send("response.output_text.done", self._at(text=self.completion.text, logprobs=[]))
        out += self._send("response.content_part.done", self._at(part=item["content"][0]))
        out += self._send("response.output_item.done", {"output_index": 0, "item": item})
        whole = self.response()
        return out + self._send(f"response.{whole['status']}", {"response": whole})

    def fail(self, error: ApiError) -> bytes:
        """A failure after the first event: the ``error`` event, then ``response.failed`` with the error."""
        out = self._open() + self._send(
            "error", {"code": error.code or error.kind, "message": error.message, "param": error.param}
        )
        failed = {**self.response(), "status": "failed", "error": {"code": "server_error", "message": error.message}}
        return out + self._send("response.failed", {"response": failed})

    def body(self) -> bytes:
        return json.dumps(self.response()).encode()

    def message(self, status: str | None = None) -> dict:
        """The one output item: the assistant's message holding the text so far."""
        part = {"type": "output_text", "text": self.completion.text, "annotations": [], "logprobs": []}
        status = status or ("completed" if self.completion.finish_reason == "stop" else "incomplete")
        return {"type": "message", "id": self.item, "status": status, "role": "assistant", "content": [part]}

    def response(self, status: str | None = None) -> dict:
        """The ``response`` object: completed, incomplete (max_output_tokens) or ``status`` (in_progress)."""
        sample, finish = self.completion.request.sample, self.completion.finish_reason
        status = status or ("incomplete" if finish == "length" else "completed")
        output = [] if status == "in_progress" else [self.message()]
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": sample.get("instructions"),
            "max_output_tokens": sample.get("max_output_tokens"),
            "model": self.completion.request.model,
            "output": output,
            "parallel_tool_calls": False,
            "previous_response_id": None,
            "store": False,
            "temperature": sample.get("temperature"),
            "top_p": sample.get("top_p"),
            "text": {"format": {"type": "text"}},
            "tool_choice": "none",
            "tools": [],
            "truncation": "disabled",
            "metadata": sample.get("metadata") or {},
            "usage": usage(self.completion) if output else None,
        }

    def _open(self) -> bytes:
        """The opening events, once: created, in_progress, the message item and its text part added."""
        if self.started:
            return b""
        self.started, begun = True, {"response": self.response("in_progress")}
        item, part = self.message("in_progress"), {"type": "output_text", "text": "", "annotations": []}
        return (
            self._send("response.created", begun)
            + self._send("response.in_progress", begun)
            + self._send("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}})
            + self._send("response.content_part.added", self._at(part=part))
        )

    def _at(self, **fields: Any) -> dict:
        return {"item_id": self.item, "output_index": 0, "content_index": 0, **fields}

    def _send(self, kind: str, payload: dict) -> bytes:
        self.sequence += 1
        return event(kind, {**payload, "sequence_number": self.sequence - 1})
