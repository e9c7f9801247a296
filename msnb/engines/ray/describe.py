"""TorchServe's describe answer (``GET /models/NAME``) for a model the local Ray serves: TorchServe's fields, in its
order, from the model's folder and its replicas; ``customizedMetadata`` from the model's own handler."""

from __future__ import annotations

from typing import Any

from msnb.templates.msnb_serving import DEFAULT_BATCH_DELAY_MS, DEFAULT_RESPONSE_TIMEOUT_S

STARTUP_TIMEOUT_S = DEFAULT_RESPONSE_TIMEOUT_S  # TorchServe's startupTimeout default is its responseTimeout's: 120 s
# Fields TorchServe writes whose values are its own frontend's (retry, parallelism, sequences): its defaults.
FIXED = {"maxRetryTimeoutInSec": 300, "clientTimeoutInMills": 0, "parallelType": "", "parallelLevel": 0,
         "deviceType": "cpu", "continuousBatching": False, "useJobTicket": False, "useVenv": False}  # fmt: skip
SEQUENCE = {"sequenceMaxIdleMSec": 0, "sequenceTimeoutMSec": 0, "maxNumSequence": 0, "maxSequenceJobQueueSize": 0}


def describe(engine: Any, entry: Any, customized: bool) -> dict:
    """The describe entry of a registered model (``entry``: msnb.engines.ray.model_registry.Entry)."""
    from msnb.templates.msnb_ray_load import read_folder

    _, config = read_folder(entry.folder)
    status = engine.status(entry.name)
    low = int(config.get("minWorkers") or 1)
    body = {
        "modelName": entry.name,
        "modelVersion": entry.version,
        "modelUrl": entry.url,
        "runtime": "python",
        "minWorkers": low,
        "maxWorkers": int(config.get("maxWorkers") or low),
        "batchSize": int(config.get("batchSize") or 1),
        "maxBatchDelay": int(config.get("maxBatchDelay") or DEFAULT_BATCH_DELAY_MS),
        "responseTimeout": int(config.get("responseTimeout") or DEFAULT_RESPONSE_TIMEOUT_S),
        "startupTimeout": int(config.get("startupTimeout") or STARTUP_TIMEOUT_S),
        **FIXED,
        "stateful": bool(config.get("sequenceBatching")),
        **SEQUENCE,
        "loadedAtStartup": entry.at_startup,
        "workers": [_worker(w) for w in status.workers],
        "jobQueueStatus": {"remainingCapacity": 100, "pendingRequests": 0},
    }
    if customized:
        body["customizedMetadata"] = _customized(engine, entry.name)
    return body


def _worker(worker: Any) -> dict:
    """A replica as TorchServe's worker entry (Ray keeps no pid or start time a client may read here)."""
    return {"id": worker.id, "startTime": "", "status": worker.status, "memoryUsage": 0, "pid": -1, "gpu": False,
            "gpuUsage": "N/A"}  # fmt: skip


def _customized(engine: Any, name: str) -> Any:
    """The handler's own describe answer, as the router's replica asks it (TorchServe's customizedMetadata)."""
    resp = engine.client.call("GET", f"{engine.inference_url}/models/{name}?customized=true", "inference")
    if not resp.ok:  # the handler failed its describe: TorchServe answers with the handler's error
        from msnb.engines.ray.model_registry import RegistryError

        body = _json(resp)
        raise RegistryError(resp.status_code, body.get("type", "InternalServerException"),
                            body.get("message", "Prediction failed"))  # fmt: skip
    answer = resp.json()
    return answer[0].get("customizedMetadata", {}) if isinstance(answer, list) and answer else {}


def _json(resp: Any) -> dict:
    try:
        body = resp.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
