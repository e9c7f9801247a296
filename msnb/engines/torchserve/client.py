"""One TorchServe's REST APIs by composition: management (register, versions, scale), inference, metrics.

``TorchServeClient`` needs only URLs and keys: ``LocalServer`` owns one, ``msnb predict --url`` makes
one for any server, and the tests use the same object. It never touches files: placing archives in a
model store is the server's job.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

from prometheus_client.parser import text_string_to_metric_families

from msnb.engines.auth import AuthorisedSession, Keys
from msnb.engines.chunks import ChunkReader, is_stream
from msnb.engines.models import ModelStatus, PredictionError, RawRequest, decode, encode, error_body
from msnb.engines.store import next_version
from msnb.engines.torchserve.config import LIMIT_OPTIONS, Limits
from msnb.engines.torchserve.logs import LogCursor
from msnb.errors import ServerError
from msnb.templates.msnb_serving import DEFAULT_MAX_BYTES, DEFAULT_RESPONSE_TIMEOUT_S

REGISTER_TIMEOUT_S = 600.0
# A prediction waits at most for one batch ahead of it and its own, each bounded by the model's responseTimeout
# (TorchServe restarts a worker slower than that), plus the batch delay and the frontend: the client's default.
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
    (msnb.engines.torchserve.raw_request), anything else encoded (JSON, or bytes as octet-stream)."""
    if isinstance(data, RawRequest):
        return data.body, data.http_headers()
    body, ctype = encode(data)
    return body, {"Content-Type": ctype}


class TorchServeClient:
    """The REST APIs of one TorchServe, with the right token on every call.

    ``log_dir`` (a server on this machine) lets errors carry the worker's log lines; ``alive`` (the
    owner's "is my process running") turns a refused connection into "the server is not running".
    """

    def __init__(
        self,
        inference_url: str,
        management_url: str | None = None,
        metrics_url: str | None = None,
        *,
        keys: Keys | None = None,
        log_dir: Path | None = None,
        alive: Callable[[], bool] | None = None,
        limits: Limits | None = None,
    ):
        self.inference_url = inference_url.rstrip("/")
        self.management_url = (management_url or "").rstrip("/") or None
        self.metrics_url = (metrics_url or "").rstrip("/") or None
        self.keys = keys or Keys(None, None, enabled=False)
        self.log_dir = Path(log_dir) if log_dir else None
        self._alive = alive
        self.limits = limits or Limits()  # what the server was started with (TorchServe's defaults if unknown)
        self._http = AuthorisedSession(self.keys)
        self._timeouts: dict[tuple[str, str | None], float] = {}  # (name, version) -> predict timeout

    @classmethod
    def connect(cls, url: str, token_file: Path | None = None) -> "TorchServeClient":
        """A client for a server msnb did not start: its key file (if any) is used as given, never renewed."""
        return cls(url, keys=Keys(token_file, None, enabled=token_file is not None))

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ registration
    def register(
        self,
        url: str,
        name: str,
        version: str,
        *,
        workers: int | None = None,
        batch_size: int | None = None,
        max_batch_delay: int | None = None,
        response_timeout: int | None = None,
    ) -> ModelStatus:
        """Register the archive at ``url`` (a model-store entry) and wait until a worker is ready."""
        params = {
            "url": url,
            "synchronous": "true",
            "initial_workers": workers or 1,
            "batch_size": batch_size,
            "max_batch_delay": max_batch_delay,
            "response_timeout": response_timeout,
        }
        self._timeouts.clear()  # a new version (and default) may have another responseTimeout
        cursor = self.log_cursor()
        resp = self.call(
            "POST",
            f"{self.management_url}/models",
            "management",
            timeout=REGISTER_TIMEOUT_S,
            params={k: v for k, v in params.items() if v is not None},
        )
        if not resp.ok:
            self._refused(resp, name, version, cursor)
        status = self.status(name, version)
        if workers and len(status.workers) != workers:  # the archive's minWorkers wins over initial_workers
            status = self.scale(name, workers, version=version)
        return status

    def _refused(self, resp, name: str, version: str, cursor) -> NoReturn:
        """A refused registration: take back what the server may have kept, then say why with the log lines."""
        self.unregister_version(name, version, missing_ok=True)
        message, _, _ = error_body(resp)
        raise ServerError(
            f"Registering {name} {version} failed: HTTP {resp.status_code} {message}",
            _hint(message, "read the log lines below."),
            details=_details(cursor),
        )

    def set_default(self, name: str, version: str) -> None:
        self._timeouts.clear()
        resp = self.call("PUT", f"{self.management_url}/models/{name}/{version}/set-default", "management")
        if not resp.ok:
            raise ServerError(
                f"Could not make {name} {version} the default: {error_body(resp)[0]}",
                "call server.models() to see what is registered.",
            )

    def unregister_version(self, name: str, version: str, *, missing_ok: bool = False) -> None:
        """Unregister one version; an unknown one is an error unless ``missing_ok``."""
        resp = self._manage(
            "DELETE",
            f"/models/{name}/{version}",
            f"Unregistering {name} {version}",
            allow=(404,),
            timeout=REGISTER_TIMEOUT_S,
        )
        if resp.status_code == 404 and not missing_ok:
            raise self.not_found(name, version)

    def barrier(self, name: str, version: str, timeout: float) -> bool:
        """Wait until a worker of the version has answered every job queued before this call.

        TorchServe's customized describe is itself a job in the version's queue (measured: it returns
        only after the batches ahead of it), so its answer is the drain's barrier. False on a timeout.
        """
        try:
            resp = self.call(
                "GET",
                f"{self.management_url}/models/{name}/{version}",
                "management",
                params={"customized": "true"},
                timeout=timeout,
            )
        except ServerError:
            return False
        return resp.ok

    def free_version(self, name: str, version: str) -> str:
        """``version``, or the next ``version-rN`` when it (or a revision of it) is registered (a redeploy's new
        version): revisions count up, they never go back to a number an earlier redeploy used."""
        return next_version(version, {m.version for m in self.versions(name)})

    def scale(self, name: str, workers: int, *, version: str | None = None) -> ModelStatus:
        """Set the number of workers of a model (its default version unless ``version``) and wait for them."""
        url = f"{self.management_url}/models/{name}" + (f"/{version}" if version else "")
        resp = self.call(
            "PUT",
            url,
            "management",
            timeout=REGISTER_TIMEOUT_S,
            params={"min_worker": workers, "max_worker": workers, "synchronous": "true"},
        )
        if resp.status_code == 404:
            raise self.not_found(name, version)
        if not resp.ok:
            raise ServerError(
                f"Scaling {name} to {workers} workers failed: {error_body(resp)[0]}",
                "check the worker log (server.log_tail()).",
            )
        return self.status(name, version)

    def models(self) -> list[ModelStatus]:
        """Every registered version of every model, with its workers."""
        resp = self._manage("GET", "/models", "Listing the models", params={"limit": 1000})
        out = []
        for entry in resp.json().get("models", []):
            out.extend(self.versions(entry["modelName"]))
        return out

    def status(self, name: str, version: str | None = None) -> ModelStatus:
        """One version of a model (its default version unless ``version``)."""
        for model in self.versions(name):
            if model.version == version or (version is None and model.is_default):
                return model
        raise self.not_found(name, version)

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
        self, name: str, version: str | None, error: dict, sent: int, cursor: LogCursor | None
    ) -> PredictionError:
        where = f"{name}" + (f" {version}" if version else "")
        return PredictionError(
            f"{where}'s stream ended with an error after {sent} chunks: {error.get('error')}",
            error.get("hint") or "check the worker log (server.log_tail()).",
            details=_details(cursor),
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

    def metrics(self) -> dict[str, list[tuple[dict, float]]]:
        """The metrics endpoint, parsed: sample name -> [(labels, value), ...]."""
        resp = self.call("GET", f"{self.metrics_url}/metrics", "none")
        out: dict[str, list[tuple[dict, float]]] = {}
        for family in text_string_to_metric_families(resp.text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out

    # ------------------------------------------------------------------ internals
    def _infer(self, api: str, name: str, data: Any, version: str | None, timeout: float | None) -> Any:
        body, headers = _request(data)
        timeout = timeout or self.predict_timeout(name, version)
        cursor = self.log_cursor()
        url = f"{self.inference_url}/{api}/{name}" + (f"/{version}" if version else "")
        resp = self.call("POST", url, "inference", data=body, headers=headers, timeout=timeout)
        if resp.ok:
            return decode(resp)
        self._failed(resp, name, version, body, cursor)

    def _failed(self, resp, name: str, version: str | None, body: bytes, cursor: LogCursor | None) -> NoReturn:
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
            details = _crash_details(cursor)
        else:
            details = _details(cursor, wait=resp.status_code >= 500)
        raise PredictionError(
            f"{where} answered HTTP {resp.status_code}: {message}",
            hint or _hint(details + message, "check the input against what the handler expects."),
            details=details,
            status=resp.status_code,
            body=payload,
        )

    def predict_timeout(self, name: str, version: str | None = None) -> float:
        """How long a prediction may take: from the model's responseTimeout (see PREDICT_TIMEOUT), read once per
        model version; the default responseTimeout when the model cannot be described (no management URL)."""
        key = (name, version)
        if key not in self._timeouts:
            seconds = None
            if self.management_url:
                try:
                    seconds = self.status(name, version).response_timeout
                except ServerError:
                    seconds = None  # the prediction itself reports what is wrong
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

    def _manage(self, method: str, path: str, doing: str, *, allow: tuple[int, ...] = (), **kwargs):
        """A management call; an answer that is neither 2xx nor in ``allow`` is a ServerError naming the step."""
        resp = self.call(method, f"{self.management_url}{path}", "management", **kwargs)
        if not resp.ok and resp.status_code not in allow:
            raise ServerError(
                f"{doing} failed: HTTP {resp.status_code} {error_body(resp)[0]}",
                "check the server log (server.log_tail()).",
            )
        return resp

    def versions(self, name: str) -> list[ModelStatus]:
        """Every registered version of one model ([] when it is not registered)."""
        resp = self._manage("GET", f"/models/{name}/all", f"Describing {name}", allow=(404,))
        if resp.status_code == 404:
            return []
        default = self._manage("GET", f"/models/{name}", f"Describing {name}").json()
        default_version = str(default[0]["modelVersion"]) if default else None
        return [ModelStatus.from_describe(entry, default_version) for entry in resp.json()]

    def not_found(self, name: str, version: str | None) -> ServerError:
        served = "?"
        if self.management_url:
            served = ", ".join(f"{m.name} {m.version}" for m in self.models()) or "none"
        what = f"{name!r}" + (f" version {version!r}" if version else "")
        return ServerError(
            f"No model {what} is registered on this server (registered: {served}).",
            "register it first (server.register(...) or %ms_serve NAME); names are case-sensitive.",
        )

    # ------------------------------------------------------------------ transport
    def call(self, method: str, url: str, kind: str, **kwargs):
        """One authorised HTTP call (kind: inference, management or none)."""
        if self._alive is not None and not self._alive():
            raise ServerError("The local TorchServe is not running.", "start it with server.start() (or %ms_serve).")
        return self._http.call(method, url, kind, **kwargs)

    def log_cursor(self) -> LogCursor | None:
        return LogCursor(self.log_dir) if self.log_dir else None


def _hint(message: str, default: str) -> str:
    return next((hint for key, hint in HINTS.items() if key.lower() in message.lower()), default)


def _crash_details(cursor: LogCursor | None) -> str:
    """The dead worker's last lines; Java logs the disconnect a moment after failing the batch."""
    if cursor is None:
        return ""
    deadline = time.monotonic() + 2.0
    details = cursor.crash()
    while not details and time.monotonic() < deadline:
        time.sleep(0.05)
        details = cursor.crash()
    return details or cursor.details()


def _details(cursor: LogCursor | None, wait: bool = True) -> str:
    """The worker's traceback since ``cursor``; Java relays worker output a moment after answering."""
    if cursor is None:
        return ""
    deadline = time.monotonic() + (1.0 if wait else 0.0)
    details = cursor.details()
    while not details and time.monotonic() < deadline:
        time.sleep(0.05)
        details = cursor.details()
    return details
