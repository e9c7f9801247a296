"""OpenAI's API over a streaming model: a request becomes the sample and its limits, a generator's str pieces become
``chat.completion`` / ``text_completion`` JSON or server-sent events, errors OpenAI's error shape.

Pure and engine-neutral: the request body, as the client sent it, is the sample the handler's ``preprocess``
receives; each str piece the model's generator yields (one chunk of its stream) counts as one completion token.
``max_tokens`` closes the stream after that many pieces (``finish_reason: "length"``), ``stop`` strings cut the text,
even across pieces. Fields whose answer msnb cannot shape (``n > 1``, tools, logprobs, ...) are refused with a 400
naming the field, never ignored. Depends only on the standard library, never on msnb.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

CHAT, TEXT, RESPONSES = "chat", "text", "responses"  # /v1/chat/completions, /v1/completions, /v1/responses
ROUTES = {"/v1/chat/completions": CHAT, "/v1/completions": TEXT, "/v1/responses": RESPONSES}
MAX_STOPS = 4  # OpenAI takes at most four stop sequences
# Fields whose answer msnb cannot shape: a value other than the default (the one given) is refused, naming them.
REFUSED: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "best_of": (None, 1),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "parallel_tool_calls": (None,),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "suffix": (None, ""),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
    "response_format": (None, {"type": "text"}),
}
WHY = {
    "n": "msnb streams one completion per request: send n requests",
    "best_of": "msnb streams one completion per request",
    "logprobs": "a generator's pieces carry no log-probabilities",
    "top_logprobs": "a generator's pieces carry no log-probabilities",
    "echo": "the completion is what the generator yields, without the prompt",
}
CHALLENGE = 'Bearer realm="msnb"'  # a 401's WWW-Authenticate on /v1 and /mcp: the clients then show the body's hint
TOOLS_WHY = "msnb models answer with text, not tool calls (a served model is itself an MCP tool at /mcp)"


class ApiError(Exception):
    """An answer in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}`` with its status."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def encoded(self) -> bytes:
        return json.dumps(self.body()).encode()

    def headers(self) -> dict[str, str]:
        """Its HTTP headers: JSON, and a 401's bearer challenge."""
        return {"content-type": "application/json", **({"www-authenticate": CHALLENGE} if self.status == 401 else {})}


def unauthorised(hint: str | None = None) -> ApiError:
    """A missing or wrong key: 401, as OpenAI answers one; ``hint``: where the key that works is (a shared Ray's)."""
    return ApiError(
        401,
        "Incorrect API key provided. Hint: "
        + (
            hint
            or 'the API key is the server\'s inference key (msnb: server.key_file, its "inference" key; Ray: the '
            "router's key)"
        )
        + ".",
        "invalid_request_error",
        None,
        "invalid_api_key",
    )


def not_found(model: str, served: list[str], what: str = "streaming models") -> ApiError:
    names = ", ".join(served) or "none"
    return ApiError(
        404,
        f"The model `{model}` does not exist. Hint: the {what} served here: {names}.",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def body_of(raw: bytes) -> Any:
    """A request's decoded JSON body; ApiError (400) when it is not JSON."""
    try:
        return json.loads(raw)
    except ValueError as err:
        raise ApiError(400, f"The request body is not JSON: {err}.") from None


def not_streaming(model: str) -> ApiError:
    """A model whose answers do not stream, asked through /v1."""
    return ApiError(
        400,
        f"The model `{model}` does not stream: /v1 serves models whose inference or postprocess is a "
        "generator yielding str pieces. Hint: make inference a generator (docs/streaming.md), or ask it "
        f"at /predictions/{model} (or as the MCP tool `{model}`).",
        param="model",
    )


def upstream_error(status: int, answer: Any) -> ApiError:
    """The model's own error answer (the handler's ``{"error", "hint", ...}`` or TorchServe's ``{"message"}``)."""
    if isinstance(answer, dict):
        message = str(answer.get("error") or answer.get("message") or answer)
        if answer.get("hint"):
            message += f" Hint: {answer['hint']}"
    else:
        message = str(answer)
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return ApiError(status if status >= 400 else 500, message, kind)


@dataclass(frozen=True)
class Request:
    """What msnb takes from a request: the model, the sample (the whole body) and the limits it keeps."""

    kind: str
    model: str
    sample: dict
    stream: bool = False
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    include_usage: bool = False

    def upstream(self, raw: bytes) -> bytes:
        """The body the model receives: the client's own (``raw``), or the sample a Responses request stands for."""
        return json.dumps(self.sample).encode() if self.kind == RESPONSES else raw


def model_of(body: Any) -> str:
    """The requested model's name; ApiError (400) when the body is no object or names none."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "`model` is required: a served model's name (GET /v1/models lists them).", param="model")
    return model


def stream_of(body: dict) -> bool:
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise ApiError(400, "`stream` must be true or false.", param="stream")
    return stream


def parse(kind: str, body: Any) -> Request:
    """The request of ``kind`` (CHAT or TEXT) from its decoded JSON body; ApiError (400) naming a bad field."""
    model = model_of(body)
    _check_input(kind, body)
    refuse_unsupported(body)
    stream = stream_of(body)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise ApiError(400, "`stream_options` may hold only `include_usage`.", param="stream_options")
    return Request(
        kind, model, body, stream, max_tokens(body), _stops(body.get("stop")), bool(options.get("include_usage"))
    )


def _check_input(kind: str, body: dict) -> None:
    if kind == CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "`messages` must be a non-empty list of message objects.", param="messages")
        return
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(
            400,
            "`prompt` must be one string (msnb streams one completion per request: send one request per prompt).",
            param="prompt",
        )


def refuse_unsupported(body: dict, refused: dict[str, tuple[Any, ...]] = REFUSED) -> None:
    """ApiError (400) naming the first field of ``refused`` whose value is not one it allows."""
    for name, allowed in refused.items():
        if name in body and body[name] not in allowed:
            why = TOOLS_WHY if "tool" in name or "function" in name else WHY.get(name, "msnb cannot honour it")
            raise ApiError(400, f"`{name}` is not supported here: {why}. Hint: leave `{name}` out.", param=name)


def max_tokens(body: dict, names: tuple[str, ...] = ("max_completion_tokens", "max_tokens")) -> int | None:
    """The most pieces to stream, from the first of ``names`` the body sets (None: no limit)."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"`{name}` must be a positive integer (the most pieces to stream).", param=name)
        return value
    return None


def _stops(stop: Any) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else stop
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
        raise ApiError(
            400, f"`stop` must be a non-empty string or a list of at most {MAX_STOPS} of them.", param="stop"
        )
    return tuple(stops)


@dataclass
class Completion:
    """One request's completion as its pieces arrive: the text to send now (a possible start of a stop string is
    held back), whether the stream should close, and why it ended."""

    request: Request
    id: str = field(default_factory=lambda: f"msnb-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    pieces: int = 0  # pieces read: the completion tokens
    text: str = ""  # the text sent (or to send) so far
    held: str = ""  # a tail that may start a stop string
    finish_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def feed(self, piece: str) -> str:
        """One piece of the generator: the text it releases now ("" while held back or after the end)."""
        if self.done:
            return ""
        self.pieces += 1
        out = self._cut(self.held + piece)
        if not self.done and self.request.max_tokens is not None and self.pieces >= self.request.max_tokens:
            out += self.held
            self.held, self.finish_reason = "", "length"
        self.text += out
        return out

    def end(self) -> str:
        """The stream ended: the text still held, and ``finish_reason`` set."""
        out, self.held = ("" if self.done else self.held), ""
        self.finish_reason = self.finish_reason or "stop"
        self.text += out
        return out

    def _cut(self, text: str) -> str:
        found = [(text.find(s), s) for s in self.request.stop if s in text]
        if found:
            self.finish_reason, self.held = "stop", ""
            return text[: min(found)[0]]
        keep = max(
            (n for s in self.request.stop for n in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:n])),
            default=0,
        )
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def usage(self) -> dict:
        """Completion tokens: the pieces read. Prompt tokens: 0, the handler's tokenizer is not msnb's to see."""
        return {"prompt_tokens": 0, "completion_tokens": self.pieces, "total_tokens": self.pieces}
