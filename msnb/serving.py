"""The model API of a LocalServer: register, redeploy, scale, describe, predict, explain, metrics."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from msnb.errors import ServerError
from msnb.spec import HandlerSpec
from msnb.tsmodels import (ModelStatus, PredictionError, decode, encode, error_body, place, read_manifest, remove,
                           safe_name)

REGISTER_TIMEOUT_S = 600.0
HINTS = {
    "Failed to start workers": "the handler failed to load (an import or init_function raised); its traceback "
                               "is below. Fix the handler and register again.",
    "pip package installation failed": "a requirement could not be installed: check its name and version pin "
                                       "(pip's message is below).",
    "did not respond in given time": "the handler took longer than the model's response_timeout, so TorchServe "
                                     "restarted its worker; register with a larger response_timeout= or make "
                                     "the handler faster.",
    "Worker died": "the handler's process exited (os._exit, a crash or out of memory); TorchServe restarts it, "
                   "see the worker log below.",
}


class ServingAPI:
    """Mixed into LocalServer, which provides _call, _cursor, the URLs and the model store."""

    # ------------------------------------------------------------------ registration
    def register(self, mar_or_spec: HandlerSpec | str | Path, *, workers: int | None = None,
                 batch_size: int | None = None, max_batch_delay: int | None = None,
                 response_timeout: int | None = None) -> ModelStatus:
        """Register a .mar, a no-archive folder or a HandlerSpec and wait until a worker is ready."""
        name, version, url, spec_workers = self._place(mar_or_spec)
        workers = workers or spec_workers
        params = {"url": url, "synchronous": "true", "initial_workers": workers or 1, "batch_size": batch_size,
                  "max_batch_delay": max_batch_delay, "response_timeout": response_timeout}
        cursor = self._cursor()
        resp = self._call("POST", f"{self.management_url}/models", "management", timeout=REGISTER_TIMEOUT_S,
                          params={k: v for k, v in params.items() if v is not None})
        if not resp.ok:
            self._forget(name, version, url)
            message, _, _ = error_body(resp)
            raise ServerError(f"Registering {name} {version} failed: HTTP {resp.status_code} {message}",
                              _hint(message, "read the log lines below."), details=_details(cursor))
        status = self.status(name, version)
        if workers and len(status.workers) != workers:  # the archive's minWorkers wins over initial_workers
            status = self.scale(name, workers, version=version)
        return status

    def _place(self, mar_or_spec: HandlerSpec | str | Path) -> tuple[str, str, str, int | None]:
        """(name, version, url in the model store, the spec's workers) of what is to be registered."""
        if isinstance(mar_or_spec, HandlerSpec):
            name, version = mar_or_spec.name, mar_or_spec.version
            self._refuse_duplicate(name, version)
            from msnb import archive

            # The fastest format to register; the in-process validation belongs to the build step.
            path = archive.build(mar_or_spec, self.model_store, fmt="no-archive",
                                 archive_name=safe_name(name, version), validate=False)
            return name, version, path.name, mar_or_spec.workers
        path = Path(mar_or_spec).expanduser()
        if not path.exists():
            raise ServerError(f"No model archive at {path}.", "build one first (msnb.build / %ms_build).")
        name, version = read_manifest(path)
        self._refuse_duplicate(name, version)
        return name, version, place(path, self.model_store, name, version), None

    def redeploy(self, spec: HandlerSpec) -> ModelStatus:
        """Register ``spec`` as a new version, make it the default, unregister the old ones; no restart."""
        old = self._describe(spec.name)
        if not old:
            return self.register(spec)
        taken = {m.version for m in old}
        version, n = spec.version, 1
        while version in taken:
            n += 1
            version = f"{spec.version}-r{n}"
        self.register(spec.replace(version=version))
        resp = self._call("PUT", f"{self.management_url}/models/{spec.name}/{version}/set-default", "management")
        if not resp.ok:
            raise ServerError(f"Could not make {spec.name} {version} the default: {error_body(resp)[0]}",
                              "call server.models() to see what is registered.")
        for model in old:
            self._forget(model.name, model.version, model.url)
        return self.status(spec.name, version)

    def unregister(self, name: str, version: str | None = None) -> None:
        """Unregister one version (or every version) of a model and delete its files from the model store."""
        targets = [m for m in self._describe(name) if version in (None, m.version)]
        if not targets:
            raise self._not_found(name, version)
        for model in sorted(targets, key=lambda m: m.is_default):  # the default version goes last
            self._forget(model.name, model.version, model.url)

    def scale(self, name: str, workers: int, *, version: str | None = None) -> ModelStatus:
        """Set the number of workers of a model (its default version unless ``version``) and wait for them."""
        url = f"{self.management_url}/models/{name}" + (f"/{version}" if version else "")
        resp = self._call("PUT", url, "management", timeout=REGISTER_TIMEOUT_S,
                          params={"min_worker": workers, "max_worker": workers, "synchronous": "true"})
        if resp.status_code == 404:
            raise self._not_found(name, version)
        if not resp.ok:
            raise ServerError(f"Scaling {name} to {workers} workers failed: {error_body(resp)[0]}",
                              "check the worker log (server.log_tail()).")
        return self.status(name, version)

    def models(self) -> list[ModelStatus]:
        """Every registered version of every model, with its workers."""
        resp = self._manage("GET", "/models", "Listing the models", params={"limit": 1000})
        out = []
        for entry in resp.json().get("models", []):
            out.extend(self._describe(entry["modelName"]))
        return out

    def status(self, name: str, version: str | None = None) -> ModelStatus:
        """One version of a model (its default version unless ``version``)."""
        for model in self._describe(name):
            if model.version == version or (version is None and model.is_default):
                return model
        raise self._not_found(name, version)

    # ------------------------------------------------------------------ inference
    def predict(self, name: str, data: Any, *, version: str | None = None, timeout: float | None = None) -> Any:
        """POST one input (JSON-able as JSON, bytes/file as binary); returns the decoded answer."""
        return self._infer("predictions", name, data, version, timeout)

    def explain(self, name: str, data: Any, *, version: str | None = None, timeout: float | None = None) -> Any:
        return self._infer("explanations", name, data, version, timeout)

    def predict_many(self, name: str, inputs: list, *, version: str | None = None,
                     return_exceptions: bool = False) -> list:
        """Send all inputs at once (so TorchServe can batch them); answers in input order."""
        inputs = list(inputs)

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
        resp = self._call("GET", f"{self.metrics_url}/metrics", "none")
        out: dict[str, list[tuple[dict, float]]] = {}
        for family in text_string_to_metric_families(resp.text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out

    # ------------------------------------------------------------------ internals
    def _infer(self, api: str, name: str, data: Any, version: str | None, timeout: float | None) -> Any:
        body, ctype = encode(data)
        cursor = self._cursor()
        url = f"{self.inference_url}/{api}/{name}" + (f"/{version}" if version else "")
        resp = self._call("POST", url, "inference", data=body, headers={"Content-Type": ctype},
                          timeout=timeout or REGISTER_TIMEOUT_S)
        if resp.ok:
            return decode(resp)
        message, hint, payload = error_body(resp)
        if resp.status_code == 404 and isinstance(payload, dict) and "NotFound" in str(payload.get("type")):
            raise self._not_found(name, version)
        where = f"{name}" + (f" {version}" if version else "")
        details = _details(cursor, wait=resp.status_code >= 500)
        raise PredictionError(f"{where} answered HTTP {resp.status_code}: {message}",
                              hint or _hint(details + message, "check the input against what the handler expects."),
                              details=details, status=resp.status_code, body=payload)

    def _manage(self, method: str, path: str, doing: str, *, allow: tuple[int, ...] = (), **kwargs):
        """A management call; an answer that is neither 2xx nor in ``allow`` is a ServerError naming the step."""
        resp = self._call(method, f"{self.management_url}{path}", "management", **kwargs)
        if not resp.ok and resp.status_code not in allow:
            raise ServerError(f"{doing} failed: HTTP {resp.status_code} {error_body(resp)[0]}",
                              "check the server log (server.log_tail()).")
        return resp

    def _describe(self, name: str) -> list[ModelStatus]:
        """Every registered version of one model ([] when it is not registered)."""
        resp = self._manage("GET", f"/models/{name}/all", f"Describing {name}", allow=(404,))
        if resp.status_code == 404:
            return []
        default = self._manage("GET", f"/models/{name}", f"Describing {name}").json()
        default_version = str(default[0]["modelVersion"]) if default else None
        return [ModelStatus.from_describe(entry, default_version) for entry in resp.json()]

    def _refuse_duplicate(self, name: str, version: str) -> None:
        if any(m.version == version for m in self._describe(name)):
            raise ServerError(f"{name} {version} is already registered on this server.",
                              "use server.redeploy(spec) to replace it, or server.unregister(name) first.")

    def _forget(self, name: str, version: str, url: str) -> None:
        self._manage("DELETE", f"/models/{name}/{version}", f"Unregistering {name} {version}", allow=(404,),
                     timeout=REGISTER_TIMEOUT_S)
        if url and "/" not in url:
            remove(self.model_store / url)

    def _not_found(self, name: str, version: str | None) -> ServerError:
        served = ", ".join(f"{m.name} {m.version}" for m in self.models()) or "none"
        what = f"{name!r}" + (f" version {version!r}" if version else "")
        return ServerError(f"No model {what} is registered on this server (registered: {served}).",
                           "register it first (server.register(...) or %ms_serve NAME); names are case-sensitive.")


def _hint(message: str, default: str) -> str:
    return next((hint for key, hint in HINTS.items() if key.lower() in message.lower()), default)


def _details(cursor, wait: bool = True) -> str:
    """The worker's traceback since ``cursor``; Java relays worker output a moment after answering."""
    deadline = time.monotonic() + (1.0 if wait else 0.0)
    details = cursor.details()
    while not details and time.monotonic() < deadline:
        time.sleep(0.05)
        details = cursor.details()
    return details
