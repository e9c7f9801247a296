"""TorchServe's serving settings as both sides of an archive name them: model-config.yaml's keys, TorchServe's
defaults, and msnb's keys merged under a user's own model-config.yaml (``--config-file``, torch-model-archiver's
name; msnb.options reads it).

The file wins. Its frontend keys set the handler's options (``batchSize: 8`` is ``--batch-size 8``, whatever the
option line says), so msnb's test, register call and config agree; every other key (``handler:``,
``sequenceBatching``, ``maxSequenceJobQueueSize``, ``jobQueueSize``, ``useVenv``, ...) is written as it is and
reaches ``context.model_yaml_config`` as on plain TorchServe. msnb adds only the keys the file lacks, and merges its
own ``system.extraFiles`` (the archives it unpacks) into the file's ``system`` section.

msnb imports it as ``msnb.templates.msnb_serving``; the shipped runtime, inside a model folder, by its bare name. It
imports only the standard library.
"""

from __future__ import annotations

from typing import Any

DEFAULT_RESPONSE_TIMEOUT_S = 120  # TorchServe's default responseTimeout (seconds per batch)
DEFAULT_MAX_BYTES = 6553500  # TorchServe's default max_request_size and max_response_size (6.5 MB)

# model-config key -> the HandlerSpec option it sets.
OPTION_KEYS = {
    "batchSize": "batch_size",
    "maxBatchDelay": "max_batch_delay",
    "responseTimeout": "response_timeout",
    "minWorkers": "workers",
}


def options_from(config: dict[str, Any]) -> dict[str, Any]:
    """The handler options a user's model-config.yaml sets (it wins over the option line)."""
    out = {dest: config[key] for key, dest in OPTION_KEYS.items() if isinstance(config.get(key), int)}
    device = str(config.get("deviceType", "")).lower()
    if device in ("cpu", "gpu"):
        out["device"] = device
    return out


def merged(own: dict[str, Any], users: dict[str, Any]) -> dict[str, Any]:
    """msnb's model-config under the user's: the user's keys win, ``system`` sections are merged."""
    out = {**own, **users}
    if isinstance(own.get("system"), dict) or isinstance(users.get("system"), dict):
        out["system"] = {**(own.get("system") or {}), **(users.get("system") or {})}
    return out
