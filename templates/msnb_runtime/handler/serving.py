"""One model's serving settings as both sides of an archive name them: ``ServingConfig`` (typed, with TorchServe's
defaults) to and from model-config.yaml's keys, and msnb's keys merged under a user's own model-config.yaml
(``--config-file``, torch-model-archiver's name; msnb.options reads it).

The file wins. Its frontend keys set the handler's options (``batchSize: 8`` is ``--batch-size 8``, whatever the
option line says), so msnb's test, register call and config agree; every other key (``handler:``,
``sequenceBatching``, ``maxSequenceJobQueueSize``, ``jobQueueSize``, ``useVenv``, ...) is written as it is and
reaches ``context.model_yaml_config`` as on plain TorchServe. msnb adds only the keys the file lacks, and merges its
own ``system.extraFiles`` (the archives it unpacks) into the file's ``system`` section.

msnb imports it as ``msnb.templates.msnb_serving``; the shipped runtime, inside a model folder, by its bare name. It
imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_RESPONSE_TIMEOUT_S = 120  # TorchServe's default responseTimeout (seconds per batch)
DEFAULT_MAX_BYTES = 6553500  # TorchServe's default max_request_size and max_response_size (6.5 MB)
DEFAULT_BATCH_DELAY_MS = 100  # TorchServe's default maxBatchDelay
# After a stream batch's first piece the handler pauses this long before the generator's next step, on either engine:
# the first piece still crosses threads and processes (Java's three threads on TorchServe, the replica's event loop
# on Ray) while a fast generator floods the same two cores with the next pieces. Time stamps along the way
# (docs/openai-mcp.md#measured): without the pause one first piece in four to eight reached the client after
# 50-200 ms on TorchServe; with it the slowest of 25 came after 20-60 ms.
FIRST_PIECE_HEAD_START_S = 0.005
DEVICE_TYPES = ("cpu", "gpu")  # deviceType's values; without one the device is chosen where the model runs (auto)

# model-config.yaml's frontend keys -> the ServingConfig field (and %%ms_handler option) each one says. minWorkers and
# maxWorkers are both written from ``workers`` (a fixed pool); ``workers`` is read from minWorkers.
FRONTEND_KEYS = {
    "minWorkers": "workers",
    "maxWorkers": "workers",
    "batchSize": "batch_size",
    "maxBatchDelay": "max_batch_delay",
    "responseTimeout": "response_timeout",
    "deviceType": "device",
}
SYSTEM = "system"  # model-config.yaml's section of msnb's runtime keys (extraFiles, maxGPUMemory)


@dataclass(frozen=True)
class ServingConfig:
    """One model's serving settings, typed: workers, batching, response timeout, device and GPU memory (MB); ``extra``
    holds a user's own model-config keys as they are, and wins when written (``system`` sections merged)."""

    workers: int = 1
    batch_size: int = 1
    max_batch_delay: int = DEFAULT_BATCH_DELAY_MS
    response_timeout: int = DEFAULT_RESPONSE_TIMEOUT_S
    device: str = "auto"
    max_gpu_memory: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_model_config(cls, config: Mapping[str, Any] | None) -> ServingConfig:
        """The settings a model-config mapping holds (TorchServe's defaults where it says none); all of it is kept
        as ``extra``."""
        config = dict(config or {})
        memory = (config.get(SYSTEM) if isinstance(config.get(SYSTEM), dict) else {}).get("maxGPUMemory")
        return cls(**options_from(config), max_gpu_memory=memory if isinstance(memory, int) else None, extra=config)

    @property
    def max_workers(self) -> int:
        """The pool's upper bound: TorchServe's maxWorkers (msnb writes ``workers`` for both; a user's file may not)."""
        value = self.extra.get("maxWorkers")
        return value if isinstance(value, int) and value else self.workers

    def to_model_config(self, system: Mapping[str, Any] | None = None, **keys: Any) -> dict[str, Any]:
        """The model-config.yaml mapping: the frontend keys, deviceType (cpu / gpu only), the ``system`` section
        (msnb's ``system`` keys, then maxGPUMemory), msnb's other ``keys``, all under ``extra``."""
        values = {
            "workers": self.workers,
            "batch_size": self.batch_size,
            "max_batch_delay": self.max_batch_delay,
            "response_timeout": self.response_timeout,
        }
        out: dict[str, Any] = {key: values[name] for key, name in FRONTEND_KEYS.items() if name in values}
        if self.device in DEVICE_TYPES:
            out["deviceType"] = self.device
        section = dict(system or {})
        if self.max_gpu_memory is not None:
            section["maxGPUMemory"] = self.max_gpu_memory
        if section:
            out[SYSTEM] = section
        return merged(out | keys, dict(self.extra))


def options_from(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (handler options) a model-config mapping says: whole numbers and a cpu / gpu deviceType (a
    user's file wins over the option line)."""
    out = {
        name: config[key]
        for key, name in FRONTEND_KEYS.items()
        if key != "maxWorkers" and name != "device" and isinstance(config.get(key), int)
    }
    device = str(config.get("deviceType", "")).lower()
    if device in DEVICE_TYPES:
        out["device"] = device
    return out


def merged(own: Mapping[str, Any], users: Mapping[str, Any]) -> dict[str, Any]:
    """msnb's model-config under the user's: the user's keys win, ``system`` sections are merged."""
    out = {**own, **users}
    if isinstance(own.get(SYSTEM), dict) or isinstance(users.get(SYSTEM), dict):
        out[SYSTEM] = {**(own.get(SYSTEM) or {}), **(users.get(SYSTEM) or {})}
    return out
