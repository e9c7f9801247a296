"""TorchServe's model-config as Ray Serve deployment options: actor resources, replicas, batching, the request router.

The mapping table is in docs/ray.md. Depends on the standard library and the shared handler's serving settings.
"""

from __future__ import annotations

from typing import Any

from ..handler.serving import ServingConfig
from .sequences import SequenceRouter


def deployment_options(config: dict, requirements: list[str], num_cpus: float = 1.0, gpu_mb: float | None = None):
    """TorchServe's model-config as Ray Serve deployment options (the mapping table in docs/ray.md)."""
    serving = ServingConfig.from_model_config(config)  # handler.serving: the one reading of model-config's keys
    batch, (low, high) = serving.batch_size or 1, workers(serving)
    actor: dict[str, Any] = {"num_cpus": num_cpus}
    if serving.device == "gpu":
        max_mb = serving.max_gpu_memory
        actor["num_gpus"] = min(1.0, round(float(max_mb) / gpu_mb, 2)) if max_mb and gpu_mb else 1
    if requirements:
        actor["runtime_env"] = {"pip": list(requirements)}
    options = {
        "ray_actor_options": actor,
        # below the batch size a batch never fills (Serve's default is 5)
        "max_ongoing_requests": max(16, 2 * batch),
        # a load error is an error in the user's code: retrying it 20 times only hides it
        "max_constructor_retry_count": 1,
    }
    if config.get("sequenceBatching"):  # a stateful model: each sequence's requests to one replica
        from ray.serve.config import RequestRouterConfig

        options["request_router_config"] = RequestRouterConfig(request_router_class=SequenceRouter)
    if high > low:
        options["autoscaling_config"] = {"min_replicas": low, "max_replicas": high, "target_ongoing_requests": batch}
    else:
        options["num_replicas"] = low
    return options


def workers(serving: ServingConfig) -> tuple[int, int]:
    """The replicas' (fewest, most): minWorkers and maxWorkers, at least one."""
    low = serving.workers or 1
    return low, serving.max_workers or low


def batch_settings(config: dict) -> tuple[int, float]:
    """``@serve.batch``'s max_batch_size and batch_wait_timeout_s from batchSize and maxBatchDelay (ms)."""
    serving = ServingConfig.from_model_config(config)
    return serving.batch_size or 1, serving.max_batch_delay / 1000
