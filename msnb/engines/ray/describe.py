"""TorchServe's describe answer (``GET /models/NAME``) for a model the local Ray serves: TorchServe's fields, in its
order, from the model's folder and its replicas; ``customizedMetadata`` from the model's own handler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msnb.templates.msnb_runtime.ray.management import describe_entry, no_worker, worker

if TYPE_CHECKING:
    from msnb.engines.ray.engine import LocalRay
    from msnb.engines.ray.model_registry import Entry


def describe(engine: LocalRay, entry: Entry, customized: bool, idle: bool = False) -> dict:
    """The describe entry of a registered model (``idle``: it has no worker, model_registry's ``idle``)."""
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    _, config = read_folder(entry.folder)
    running = engine.status(entry.app or entry.name).workers if entry.running else ()
    workers = [worker(w.id, w.status) for w in running]
    body = describe_entry(entry.name, entry.version, entry.url, config, workers, entry.at_startup)
    if customized and idle:  # no replica to ask: TorchServe's 503
        from msnb.engines.ray.model_registry import RegistryError

        raise RegistryError(*no_worker(entry.name, describe=True))
    if customized:
        body["customizedMetadata"] = _customized(engine, entry.app or entry.name)
    return body


def _customized(engine: LocalRay, name: str) -> Any:
    """The handler's own describe answer, as the router asks application ``name``'s replica (TorchServe's
    customizedMetadata)."""
    resp = engine.client.call("GET", f"{engine.inference_url}/models/{name}?customized=true", "inference")
    if not resp.ok:  # the handler failed its describe: TorchServe's words, the handler's error in the Hint
        from msnb.engines.ray.model_registry import RegistryError

        body = _json(resp)
        said = body.get("message")
        raise RegistryError(
            resp.status_code,
            body.get("type", "InternalServerException"),
            "Prediction failed",
            f"fix the handler's describe, which answered: {said}" if said else "",
        )
    answer = resp.json()
    return answer[0].get("customizedMetadata", {}) if isinstance(answer, list) and answer else {}


def _json(resp: Any) -> dict:
    try:
        body = resp.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
