"""What an engine says about its models, in TorchServe's API (Ray Serve's router answers it too): their status,
request bodies and answers, body size limits, errors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import requests

from msnb.errors import ServerError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES

LIMIT_OPTIONS = {
    "max_request_size": "LocalServer(max_request_size=BYTES), `msnb serve --max-request-size BYTES` "
    "or `msnb export --kserve ... --max-request-size BYTES`",
    "max_response_size": "LocalServer(max_response_size=BYTES), `msnb serve --max-response-size BYTES` "
    "or `msnb export --kserve ... --max-response-size BYTES`",
}


@dataclass(frozen=True)
class Limits:
    """TorchServe's body size limits in bytes (None: its default, 6.5 MB); a larger body is answered 413."""

    max_request_size: int | None = None
    max_response_size: int | None = None

    def __post_init__(self) -> None:
        for key in LIMIT_OPTIONS:
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ServerError(f"{key}={value!r} is not valid.", f"{key} takes a whole number of bytes > 0.")

    def properties(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in LIMIT_OPTIONS if getattr(self, key) is not None}

    def describe(self, key: str) -> str:
        """'max_request_size (6553500 bytes, TorchServe's default)'."""
        value = getattr(self, key)
        return (
            f"{key} ({value} bytes)"
            if value is not None
            else f"{key} ({DEFAULT_MAX_BYTES} bytes, TorchServe's default)"
        )


class PredictionError(ServerError):
    """TorchServe answered a prediction with an error status; ``status`` and ``body`` are its answer."""

    def __init__(
        self, message: str, hint: str | None = None, details: str | None = None, *, status: int = 0, body: Any = None
    ):
        self.status = status
        self.body = body
        super().__init__(message, hint, details)


@dataclass(frozen=True)
class WorkerStatus:
    id: str
    status: str
    pid: int | None = None


@dataclass(frozen=True)
class ModelStatus:
    """One registered version of a model, as TorchServe describes it."""

    name: str
    version: str
    is_default: bool
    workers: tuple[WorkerStatus, ...]
    url: str = ""
    batch_size: int | None = None
    max_batch_delay: int | None = None
    response_timeout: int | None = None
    pending: int = 0  # requests waiting in this version's job queue

    @property
    def ready(self) -> bool:
        return any(w.status == "READY" for w in self.workers)

    @classmethod
    def from_describe(cls, entry: dict, default_version: str | None) -> "ModelStatus":
        workers = tuple(
            WorkerStatus(str(w.get("id")), str(w.get("status")), w.get("pid")) for w in entry.get("workers", [])
        )
        version = str(entry.get("modelVersion"))
        return cls(
            name=entry["modelName"],
            version=version,
            is_default=version == default_version,
            workers=workers,
            url=entry.get("modelUrl", ""),
            batch_size=entry.get("batchSize"),
            max_batch_delay=entry.get("maxBatchDelay"),
            response_timeout=entry.get("responseTimeout"),
            pending=int((entry.get("jobQueueStatus") or {}).get("pendingRequests") or 0),
        )


RAW_TYPE = "application/octet-stream"  # what curl -T / --data-binary send without -H Content-Type
SEQUENCE_HEADER = "ts_request_sequence_id"  # TorchServe's sequence batching: the request's sequence (ts.context)


@dataclass(frozen=True)
class RawRequest:
    """A request as TorchServe's clients send it: the body as it is, its Content-Type and extra headers
    (``ts_request_sequence_id``); see msnb.engines.raw_request for building one from a magic's options."""

    body: bytes
    content_type: str = RAW_TYPE
    headers: dict[str, str] = field(default_factory=dict)

    def http_headers(self) -> dict[str, str]:
        return {**self.headers, "Content-Type": self.content_type}

    @property
    def sequence(self) -> str | None:
        """The stateful sequence this request belongs to (its ``ts_request_sequence_id`` header), if any."""
        return next((v for k, v in self.headers.items() if k.lower() == SEQUENCE_HEADER), None)

    def decoded(self) -> Any:
        """The body as a TorchServe worker hands it to the handler (ts.protocol.otf_message_handler): JSON parsed
        when sent as JSON (its bytes when it does not parse), text as str, anything else as a bytearray."""
        kind = self.content_type.split(";")[0].strip().lower()
        if kind == "application/json":
            try:
                return json.loads(self.body.decode("utf-8"))
            except ValueError:
                return bytearray(self.body)
        if kind.startswith("text"):
            return self.body.decode("utf-8")
        return bytearray(self.body)


def encode(data: Any) -> tuple[bytes, str]:
    """Request body and content type: bytes and files as octet-stream, anything else as JSON."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), "application/octet-stream"
    if hasattr(data, "read"):
        content = data.read()
        return (content.encode() if isinstance(content, str) else content), "application/octet-stream"
    try:
        return json.dumps(data, allow_nan=False).encode(), "application/json"
    except ValueError as err:
        if "Out of range float" not in str(err):
            raise _unsendable(data, err) from None
        raise ServerError(
            "Cannot send NaN or Infinity to the model: strict JSON has no such numbers.",
            "replace them before sending (e.g. None for a missing value), or send the data as bytes.",
        ) from None
    except TypeError as err:
        raise _unsendable(data, err) from None


def _unsendable(data: Any, err: Exception) -> ServerError:
    return ServerError(
        f"Cannot send a {type(data).__name__} to the model: {err}.",
        "pass JSON-able data (dicts, lists, numbers, strings; `.tolist()` for arrays and "
        "tensors), bytes, or a file opened in binary mode.",
    )


def decode(resp: requests.Response) -> Any:
    """The answer's body: JSON decoded, text as str, anything else as bytes."""
    ctype = resp.headers.get("content-type", "")
    # TorchServe sends a handler's JSON-encoded answers without any content type.
    if "json" in ctype or not ctype:
        try:
            return resp.json()
        except ValueError:
            return resp.content
    if ctype.startswith("text/"):
        return resp.text
    return resp.content


def error_body(resp: requests.Response) -> tuple[str, str | None, Any]:
    """(message, hint, body) of an error answer: the handler's {"error", "hint"} or TorchServe's {"message"}."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:500] or resp.reason, None, resp.content
    if isinstance(body, dict):
        message = body.get("error") or body.get("message") or json.dumps(body)[:500]
        return str(message), body.get("hint"), body
    return json.dumps(body)[:500], None, body
