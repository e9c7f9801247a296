"""TorchServe's inference API (predictions, explanations, streamed answers), which Ray Serve's router also answers.

``InferenceClient`` needs only an inference URL and keys: the Ray engine holds one, and
``msnb.engines.torchserve.client.TorchServeClient`` builds on it with the management and metrics APIs and the
server's log lines. Errors name the model, the status, a hint that works and (where a log can be read) the
worker's lines.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, Protocol

from msnb.engines.auth import AuthorisedSession, Keys
from msnb.engines.chunks import ChunkReader, is_stream
from msnb.engines.models import LIMIT_OPTIONS, Limits, PredictionError, RawRequest, decode, encode, error_body
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES, DEFAULT_RESPONSE_TIMEOUT_S

# A prediction waits at most for one batch ahead of it and its own, each bounded by the model's responseTimeout
# (TorchServe restarts a worker slower than that), plus the batch delay and the frontend: the client's default.
# How long an error answer waits for the worker's traceback, which Java relays a moment after the answer (longer on
# a loaded machine); a whole traceback ends the wait at once.
LOG_RELAY_S = 3.0
PREDICT_TIMEOUT = (2, 30.0)  # (batches, seconds of margin: a worker restart, a loaded machine)
HINTS = {
    "Failed to start workers": "the handler failed to load (an import or init_function raised); its traceback "
    "is below. Fix the handler and register again.",
    "pip package installation failed": "a requirement could not be installed: check its name and version pin "
    "(pip's message is below).",
    "did not respond in given time": "the handler took longer than the model's response_timeout, so TorchServe "
    "restarted its worker; register with a larger response_timeout= or make "
    "the handler faster.",
    "If this is a sequence inference": "a stateful model (sequenceBatching in its model-config) keeps at most "
    "maxNumSequence sequences open (default 1; the log lines below say when a sequence was skipped for it), at most "
    "maxSequenceJobQueueSize requests queued per sequence, and closes a sequence idle for sequenceMaxIdleMSec: raise "
    "them in the --config-file.",
    "Worker died": "the worker process ended while answering this request's batch (os._exit, a segfault or the "
    "OOM killer), so every request of that batch failed; TorchServe restarts it in ~2 s. Its last lines are below.",
}


STREAM_HEADER = "ts_stream_next"  # set by TorchServe on an answer made of intermediate responses (chunked)


def _request(data: Any) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an inference request: a RawRequest as a client sends it
    (msnb.engines.raw_request), anything else encoded (JSON, or bytes as octet-stream)."""
    if isinstance(data, RawRequest):
        return data.body, data.http_headers()
    body, ctype = encode(data)
    return body, {"Content-Type": ctype}


class Cursor(Protocol):
    """Where a server's log stood when a call started (msnb.engines.torchserve.logs.LogCursor)."""

    def details(self) -> str: ...

    def crash(self) -> str: ...


class InferenceClient:
    """The inference API of one server, with the right token on every call.

    ``alive`` (the owner's "is my process running") turns a refused connection into "the server is not running";
    ``limits`` are the body sizes the server was started with (its 413 answers name them).
    """

    def __init__(
        self,
        inference_url: str,
        *,
        keys: Keys | None = None,
        alive: Callable[[], bool] | None = None,
        limits: Limits | None = None,
    ):
        self.inference_url = inference_url.rstrip("/")
        self.keys = keys or Keys(None, None, enabled=False)
        self._alive = alive
        self.limits = limits or Limits()  # what the server was started with (TorchServe's defaults if unknown)
        self._http = AuthorisedSession(self.keys)
        self._timeouts: dict[tuple[str, str | None], float] = {}  # (name, version) -> predict timeout

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ inference
    def predict(self, name: str, data: Any, *, version: str | None = None, timeout: float | None = None) -> Any:
        """POST one input (JSON-able as JSON, bytes/file as binary); returns the decoded answer."""
        return self._infer("predictions", name, data, version, timeout)

    def explain(self, name: str, data: Any, *, version: str | None = None, timeout: float | None = None) -> Any:
        return self._infer("explanations", name, data, version, timeout)

    def predict_stream(
        self, name: str, data: Any, *, version: str | None = None, timeout: float | None = None
    ) -> Iterator[Any]:
        """POST one input and yield its answer's chunks as they arrive (text pieces, or one JSON value per line:
        msnb.engines.chunks); an answer that is not streamed is yielded whole. The handler's error line at the end of a
        stream raises a PredictionError after the chunks before it. Closing the iterator early closes the
        connection."""
        body, headers = _request(data)
        timeout = timeout or self.predict_timeout(name, version)
        cursor = self.log_cursor()
        url = f"{self.inference_url}/predictions/{name}" + (f"/{version}" if version else "")
        resp = self.call("POST", url, "inference", data=body, headers=headers, timeout=timeout, stream=True)
        with contextlib.closing(resp):
            if not resp.ok:
                self._failed(resp, name, version, body, cursor)
            answer = resp.headers.get("content-type", "")
            # a handler's own send_intermediate_predict_response streams with no Content-Type: TorchServe marks
            # such an answer with the ts_stream_next header; its pieces are read as text, as %ms_test reads them
            if not (is_stream(answer) or answer.startswith("text/") or STREAM_HEADER in resp.headers):
                yield decode(resp)
                return
            reader, sent = ChunkReader(answer), 0
            for piece in resp.iter_content(None):
                for chunk in reader.feed(piece):
                    sent += 1
                    yield chunk
            yield from reader.close()
            if reader.error is not None:
                raise self._stream_error(name, version, reader.error, sent, cursor)

    def _stream_error(
        self, name: str, version: str | None, error: dict, sent: int, cursor: Cursor | None
    ) -> PredictionError:
        where = f"{name}" + (f" {version}" if version else "")
        return PredictionError(
            f"{where}'s stream ended with an error after {sent} chunks: {error.get('error')}",
            error.get("hint") or "check the worker log (server.log_tail()).",
            details=log_details(cursor),
            status=500,
            body=error,
        )

    def predict_many(
        self, name: str, inputs: list, *, version: str | None = None, return_exceptions: bool = False
    ) -> list:
        """Send all inputs at once (so TorchServe can batch them); answers in input order."""
        inputs = list(inputs)
        self.predict_timeout(name, version)  # described once, before the threads ask

        def one(item):
            try:
                return self.predict(name, item, version=version)
            except ServerError as err:
                if return_exceptions:
                    return err
                raise

        with ThreadPoolExecutor(max_workers=max(1, min(len(inputs), 32))) as pool:
            return list(pool.map(one, inputs))

    def _infer(self, api: str, name: str, data: Any, version: str | None, timeout: float | None) -> Any:
        body, headers = _request(data)
        timeout = timeout or self.predict_timeout(name, version)
        cursor = self.log_cursor()
        url = f"{self.inference_url}/{api}/{name}" + (f"/{version}" if version else "")
        resp = self.call("POST", url, "inference", data=body, headers=headers, timeout=timeout)
        if resp.ok:
            return decode(resp)
        self._failed(resp, name, version, body, cursor)

    def _failed(self, resp, name: str, version: str | None, body: bytes, cursor: Cursor | None) -> NoReturn:
        """An inference call answered with an error status: say which, why, and the worker's lines."""
        message, hint, payload = error_body(resp)
        if resp.status_code == 404 and isinstance(payload, dict) and "NotFound" in str(payload.get("type")):
            raise self.not_found(name, version)
        if resp.status_code == 413:
            raise self._too_large(name, body, payload)
        if resp.status_code == 400 and "Token Authorization failed" in message:
            hint = "the server has token authorisation on: pass its key_file.json (--token-file)."
        where = f"{name}" + (f" {version}" if version else "")
        if "Worker died" in message:
            details = crash_details(cursor)
        else:
            details = log_details(cursor, wait=resp.status_code >= 500 or _logged_by_the_handler(payload))
        raise PredictionError(
            f"{where} answered HTTP {resp.status_code}: {message}",
            hint or hint_for(details + message, "check the input against what the handler expects."),
            details=details,
            status=resp.status_code,
            body=payload,
        )

    def predict_timeout(self, name: str, version: str | None = None) -> float:
        """How long a prediction may take: from the model's responseTimeout (see PREDICT_TIMEOUT), read once per
        model version; the default responseTimeout when the model cannot be described (no management URL)."""
        key = (name, version)
        if key not in self._timeouts:
            seconds = self.response_timeout(name, version)
            batches, margin = PREDICT_TIMEOUT
            self._timeouts[key] = batches * float(seconds or DEFAULT_RESPONSE_TIMEOUT_S) + margin
        return self._timeouts[key]

    def _too_large(self, name: str, body: bytes, payload: Any) -> PredictionError:
        """413: which body was over which limit, and the option that raises it."""
        request_limit = self.limits.max_request_size or DEFAULT_MAX_BYTES
        key, what = ("max_request_size", "request") if len(body) > request_limit else ("max_response_size", "answer")
        size = f" ({len(body)} bytes)" if what == "request" else ""
        return PredictionError(
            f"{name} answered HTTP 413: the {what}{size} is over the server's {self.limits.describe(key)}.",
            f"send less per request, or raise the limit with {LIMIT_OPTIONS[key]}.",
            status=413,
            body=payload,
        )

    # ------------------------------------------------------------------ transport
    def call(self, method: str, url: str, kind: str, **kwargs):
        """One authorised HTTP call (kind: inference, management or none)."""
        if self._alive is not None and not self._alive():
            raise ServerError("The local TorchServe is not running.", "start it with server.start() (or %ms_serve).")
        return self._http.call(method, url, kind, **kwargs)

    def log_cursor(self) -> Cursor | None:
        """Where the server's log stands now (None: no log on this machine to read errors from)."""
        return None

    # ------------------------------------------------------------------ what a management API adds
    def response_timeout(self, name: str, version: str | None) -> float | None:
        """The model's responseTimeout in seconds (None: unknown, the default applies)."""
        return None

    def served(self) -> str:
        """The registered models, for a "no such model" message ("?" when this client cannot list them)."""
        return "?"

    def not_found(self, name: str, version: str | None) -> ServerError:
        what = f"{name!r}" + (f" version {version!r}" if version else "")
        served = self.served()
        if served == "?":  # a server this client cannot list: given by its URL (`msnb predict --url`, connect)
            return ServerError(
                f"No model {what} is served at {self.inference_url}.",
                "check the name against the models that server serves (TorchServe's management API: GET /models, "
                "or the list `msnb serve` printed); names are case-sensitive.",
            )
        return ServerError(
            f"No model {what} is registered on this server (registered: {served}).",
            "register it first (server.register(...) or %ms_serve NAME); names are case-sensitive.",
        )


def hint_for(message: str, default: str) -> str:
    return next((hint for key, hint in HINTS.items() if key.lower() in message.lower()), default)


def crash_details(cursor: Cursor | None) -> str:
    """The dead worker's last lines; Java logs the disconnect a moment after failing the batch."""
    if cursor is None:
        return ""
    deadline = time.monotonic() + 2.0
    details = cursor.crash()
    while not details and time.monotonic() < deadline:
        time.sleep(0.05)
        details = cursor.crash()
    return details or cursor.details()


def _logged_by_the_handler(payload: Any) -> bool:
    """A sample the shared handler's preprocess failed (answered 400, its stage named): the worker logged the
    traceback, which Java relays a moment after the answer, as it does for every 500."""
    return isinstance(payload, dict) and payload.get("stage") == "preprocess"


def log_details(cursor: Cursor | None, wait: bool = True) -> str:
    """The worker's traceback since ``cursor``; Java relays worker output a moment after answering."""
    if cursor is None:
        return ""
    deadline = time.monotonic() + (LOG_RELAY_S if wait else 0.0)
    details = cursor.details()
    while not _complete(details) and time.monotonic() < deadline:
        time.sleep(0.05)
        details = cursor.details()
    return details


def _complete(details: str) -> bool:
    """Whole: ends with its exception line (Java relays a traceback line by line, the header first), or is a
    frontend error's line."""
    last = next((line for line in reversed(details.splitlines()) if line.strip()), "")
    return bool(last) and not last[0].isspace() and not last.startswith("Traceback (most recent call last)")
