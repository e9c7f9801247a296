"""TorchServe's management read calls as the Ray router answers them: ``GET /models`` (TorchServe's pages: limit,
next_page_token) and the describe entry of ``GET /models/NAME[?customized=true]``, in TorchServe's fields and order;
a write call (register, scale, set-default, unregister) refused with a Hint: on a cluster, the RayService's
config scales and changes the applications. The local Ray's management address (msnb.engines.ray.management) answers
with the same shapes.

Depends on the standard library and handler.serving, never on msnb.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..handler.serving import DEFAULT_BATCH_DELAY_MS, DEFAULT_RESPONSE_TIMEOUT_S

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
PAGE_LIMIT = 100  # TorchServe's default (and largest) page of GET /models
STARTUP_TIMEOUT_S = DEFAULT_RESPONSE_TIMEOUT_S  # TorchServe's startupTimeout default is its responseTimeout's: 120 s
# Fields TorchServe writes whose values are its own frontend's (retry, parallelism, sequences): its defaults.
FIXED = {
    "maxRetryTimeoutInSec": 300,
    "clientTimeoutInMills": 0,
    "parallelType": "",
    "parallelLevel": 0,
    "deviceType": "cpu",
    "continuousBatching": False,
    "useJobTicket": False,
    "useVenv": False,
}
SEQUENCE = {"sequenceMaxIdleMSec": 0, "sequenceTimeoutMSec": 0, "maxNumSequence": 0, "maxSequenceJobQueueSize": 0}
# Serve's replica states as TorchServe's worker statuses
TS_STATE = {"RUNNING": "READY", "STARTING": "STARTING", "UPDATING": "STARTING", "STOPPING": "STOPPING"}
# TorchServe's answer to a method a path does not take, and to a path it does not serve (ResourceNotFoundException's)
NOT_ALLOWED = "Requested method is not allowed, please refer to API document."
NOT_FOUND = "Requested resource is not found, please refer to API document."
# The paths TorchServe's OpenAPI description lists (OpenApiUtils.listApis), for each of its addresses
INFERENCE_PATHS = (
    "/",
    "/ping",
    "/v1/models/{model_name}:predict",
    "/v2/models/{model_name}/infer",
    "/predictions/{model_name}",
    "/predictions/{model_name}/{model_version}",
    "/api-description",
    "/metrics",
)
MANAGEMENT_PATHS = (
    "/",
    "/models",
    "/models/{model_name}",
    "/models/{model_name}/{model_version}",
    "/models/{model_name}/{model_version}/set-default",
    "/api-description",
    "/metrics",
)
TS_VERSION = "0.12.0"  # the TorchServe whose APIs these are
WRITE_HINT = (
    "on a cluster the applications are the RayService's (serve_config.yaml): scale a model by its "
    "num_replicas or autoscaling_config there, add or remove one by its application, and apply the config again "
    "(`serve deploy serve_config.yaml` or `kubectl apply -f rayservice.yaml`)"
)
Answer = tuple[int, Any]


def page(models: list[tuple[str, str]], query: dict[str, str]) -> Answer:
    """``GET /models``: ``models`` (name, url), sorted by name, one page as TorchServe's ``ApiUtils.getModelList``
    pages them: a limit over 100 or below 0 is 100, a token below 0 is 0, a value that is not a number its default;
    a ``nextPageToken`` whenever the page ends at or before the last model."""
    models = sorted(models)
    limit = java_int(query.get("limit"), PAGE_LIMIT)
    limit = PAGE_LIMIT if limit > PAGE_LIMIT or limit < 0 else limit
    start = max(java_int(query.get("next_page_token"), 0), 0)
    body: dict[str, Any] = {}
    if start + limit <= len(models):
        body["nextPageToken"] = str(start + limit)
    body["models"] = [{"modelName": n, "modelUrl": u} for n, u in models[start : start + limit]]
    return 200, body


def java_int(value: object, default: int) -> int:
    """A query parameter as TorchServe's ``NettyUtils.getIntParameter`` reads it (Java's ``Integer.parseInt``): an
    optional sign and digits within 32 bits, else ``default`` (TorchServe answers no 400 for a bad number)."""
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value)
    if not _JAVA_INT.fullmatch(text) or not -(2**31) <= int(text) < 2**31:
        return default
    return int(text)


def _given(config: dict, key: str, default: int) -> int:
    """A model-config value as TorchServe keeps it (0 and negative values too), ``default`` when it is not set."""
    value = config.get(key)
    return default if value is None else int(value)


def describe_entry(name: str, version: str, url: str, config: dict, workers: list[dict], at_startup: bool) -> dict:
    """TorchServe's describe entry (without ``customizedMetadata``) from the model's model-config ``config``."""
    low = _given(config, "minWorkers", 1)
    return {
        "modelName": name,
        "modelVersion": version,
        "modelUrl": url,
        "runtime": "python",
        "minWorkers": low,
        "maxWorkers": _given(config, "maxWorkers", low),
        "batchSize": _given(config, "batchSize", 1),
        "maxBatchDelay": _given(config, "maxBatchDelay", DEFAULT_BATCH_DELAY_MS),
        "responseTimeout": _given(config, "responseTimeout", DEFAULT_RESPONSE_TIMEOUT_S),
        "startupTimeout": int(config.get("startupTimeout") or STARTUP_TIMEOUT_S),
        **FIXED,
        "stateful": bool(config.get("sequenceBatching")),
        **SEQUENCE,
        "loadedAtStartup": at_startup,
        "workers": workers,
        "jobQueueStatus": {"remainingCapacity": 100, "pendingRequests": 0},
    }


def worker(worker_id: str, status: str) -> dict:
    """A replica as TorchServe's worker entry (Ray keeps no pid or start time a client may read here)."""
    return {
        "id": worker_id,
        "startTime": "",
        "status": status,
        "memoryUsage": 0,
        "pid": -1,
        "gpu": False,
        "gpuUsage": "N/A",
    }


def replica_workers(states: dict[str, int]) -> list[dict]:
    """Serve's replica counts by state (``replica_states``) as TorchServe's workers."""
    return [worker(f"{state}-{i}", TS_STATE.get(state, state)) for state, n in states.items() for i in range(n)]


def archive_url(name: str) -> str:
    """The ``modelUrl`` of an exported model: the archive torch-model-archiver names after the model."""
    return f"{name}.mar"


def metadata(answer: Any) -> dict:
    """A describe answer as TorchServe's frontend turns it into customizedMetadata: JSON text parsed; anything
    but a JSON object becomes ``{}`` (measured: a handler answering ``1`` is described with ``{}``); members whose
    value is null are left out, as TorchServe's Gson writes them (found by ``msnb compare``)."""
    if isinstance(answer, (bytes, bytearray, str)):
        try:
            answer = json.loads(answer)
        except ValueError:
            return {}
    return without_nulls(answer) if isinstance(answer, dict) else {}


def without_nulls(value: Any) -> Any:
    """``value`` with every null object member left out, at any depth (Gson's default; list items are kept)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return [without_nulls(v) for v in value] if isinstance(value, list) else value


def api_description(paths: tuple[str, ...]) -> dict:
    """TorchServe's ``OPTIONS /`` and ``/api-description`` (OpenAPI 3, as ``OpenApiUtils.listApis``): its
    ``paths``, each with the methods msnb answers there left unsaid."""
    info = {
        "title": "TorchServe APIs",
        "description": "TorchServe is a flexible and easy to use tool for serving deep learning models",
        "version": TS_VERSION,
    }
    return {"openapi": "3.0.1", "info": info, "paths": {p: {} for p in paths}}


def no_worker(name: str, version: str | None = None, describe: bool = False) -> tuple[int, str, str]:
    """TorchServe's 503 for a prediction (``describe``: a customized describe) on a model scaled to 0 workers, in
    ``ApiUtils``' words (its odd quote after a version included)."""
    if describe:
        said = f'Model "{name}" has no worker to serve describe request. Please use scale workers API to add workers.'
        return 503, "ServiceUnavailableException", said
    said = f'Model "{name}' + (f'" Version {version}' if version else "")
    return (
        503,
        "ServiceUnavailableException",
        f'{said}" has no worker to serve inference request. Please use scale workers API to add workers. If this is '
        "a sequence inference, please check if it is closed, or expired; or exceeds maxSequenceJobQueueSize",
    )


def write_refused(method: str, path: str) -> tuple[int, str, str]:
    """A management write call sent to the router: TorchServe's 405, with the Hint of where the change is made."""
    return 405, "MethodNotAllowedException", f"{NOT_ALLOWED} {method} {path} is not answered here.\nHint: {WRITE_HINT}."


def is_write(method: str, parts: list[str]) -> bool:
    """Whether ``method`` on ``/models[/...]`` is one of TorchServe's management write calls."""
    return parts[:1] == ["models"] and len(parts) <= 4 and method in ("POST", "PUT", "DELETE")
