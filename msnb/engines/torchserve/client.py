"""One TorchServe's REST APIs: management (register, versions, scale) and metrics, on top of the inference API
(msnb.engines.inference_api, which Ray Serve's router also answers).

``TorchServeClient`` needs only URLs and keys: ``LocalServer`` owns one, ``msnb predict --url`` makes
one for any server, and the tests use the same object. It never touches files: placing archives in a
model store is the server's job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from msnb.engines.auth import Keys
from msnb.engines.batching import parse_metrics
from msnb.engines.inference_api import InferenceClient, hint_for, log_details
from msnb.engines.models import Limits, ModelStatus, error_body
from msnb.engines.store import next_version
from msnb.engines.torchserve.logs import LogCursor
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.handler.faults import NO_CUDA_HINT, no_cuda

REGISTER_TIMEOUT_S = 600.0


class TorchServeClient(InferenceClient):
    """The REST APIs of one TorchServe, with the right token on every call: its inference API (InferenceClient)
    and its management and metrics APIs.

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
        super().__init__(inference_url, keys=keys, alive=alive, limits=limits)
        self.management_url = (management_url or "").rstrip("/") or None
        self.metrics_url = (metrics_url or "").rstrip("/") or None
        self.log_dir = Path(log_dir) if log_dir else None

    @classmethod
    def connect(cls, url: str, token_file: Path | None = None) -> "TorchServeClient":
        """A client for a server msnb did not start: its key file (if any) is used as given, never renewed."""
        return cls(url, keys=Keys(token_file, None, enabled=token_file is not None))

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
        details = log_details(cursor)
        hint = NO_CUDA_HINT if no_cuda(details) else hint_for(message, "read the log lines below.")
        raise ServerError(
            f"Registering {name} {version} failed: HTTP {resp.status_code} {message}", hint, details=details
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

    def metrics(self) -> dict[str, list[tuple[dict, float]]]:
        """The metrics endpoint, parsed: sample name -> [(labels, value), ...]."""
        return parse_metrics(self.call("GET", f"{self.metrics_url}/metrics", "none").text)

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

    # ------------------------------------------------------------------ what the inference API asks of it
    def log_cursor(self) -> LogCursor | None:
        return LogCursor(self.log_dir) if self.log_dir else None

    def response_timeout(self, name: str, version: str | None) -> float | None:
        if not self.management_url:
            return None
        try:
            return self.status(name, version).response_timeout
        except ServerError:
            return None  # the prediction itself reports what is wrong

    def served(self) -> str:
        if not self.management_url:
            return "?"
        return ", ".join(f"{m.name} {m.version}" for m in self.models()) or "none"
