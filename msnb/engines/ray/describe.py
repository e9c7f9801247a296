"""TorchServe's describe answer (``GET /models/NAME``) for a model the local Ray serves: TorchServe's fields, in its
order, from the model's folder and its replicas; ``customizedMetadata`` from the model's own handler."""

from __future__ import annotations

from typing import Any

from msnb.templates.msnb_runtime.ray.management import describe_entry, worker


def describe(engine: Any, entry: Any, customized: bool) -> dict:
    """The describe entry of a registered model (``entry``: msnb.engines.ray.model_registry.Entry)."""
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    _, config = read_folder(entry.folder)
    workers = [worker(w.id, w.status) for w in engine.status(entry.app or entry.name).workers]
    body = describe_entry(entry.name, entry.version, entry.url, config, workers, entry.at_startup)
    if customized:
        body["customizedMetadata"] = _customized(engine, entry.app or entry.name)
    return body


def _customized(engine: Any, name: str) -> Any:
    """The handler's own describe answer, as the router asks application ``name``'s replica (TorchServe's
    customizedMetadata)."""
    resp = engine.client.call("GET", f"{engine.inference_url}/models/{name}?customized=true", "inference")
    if not resp.ok:  # the handler failed its describe: TorchServe answers with the handler's error
        from msnb.engines.ray.model_registry import RegistryError

        body = _json(resp)
        raise RegistryError(
            resp.status_code, body.get("type", "InternalServerException"), body.get("message", "Prediction failed")
        )
    answer = resp.json()
    return answer[0].get("customizedMetadata", {}) if isinstance(answer, list) and answer else {}


def _json(resp: Any) -> dict:
    try:
        body = resp.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
