"""TorchServe's model-config as Ray Serve deployment options: actor resources, replicas, batching, the request router.

The mapping table is in docs/ray.md. Depends on the standard library and the shared handler's serving settings.
"""

from __future__ import annotations

from typing import Any

from ..handler.serving import ServingConfig
from .sequences import SequenceRouter


def deployment_options(
    config: dict,
    requirements: list[str],
    num_cpus: float = 1.0,
    gpu_mb: float | None = None,
    running: int | None = None,
):
    """TorchServe's model-config as Ray Serve deployment options (the mapping table in docs/ray.md); ``running``: the
    replicas that run now, kept by a scale to a range that holds them (TorchServe keeps its workers within
    minWorkers..maxWorkers)."""
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
    return options | replicas(low, high, batch, running)


def replicas(low: int, high: int, batch: int, running: int | None = None) -> dict[str, Any]:
    """The deployment options of ``low``..``high`` replicas: a fixed number, else Serve's autoscaling between the two
    (from the ``running`` ones, kept within the range as TorchServe keeps its workers); none for a model scaled to 0
    workers (Serve takes no num_replicas of 0; the router answers its predictions with TorchServe's 503)."""
    if high == 0:
        return {"autoscaling_config": {"min_replicas": 0, "max_replicas": 1, "initial_replicas": 0}}
    if high <= low:
        return {"num_replicas": low}
    scaling = {"min_replicas": low, "max_replicas": high, "target_ongoing_requests": batch}
    return {
        "autoscaling_config": scaling | ({} if running is None else {"initial_replicas": min(max(running, low), high)})
    }


def workers(serving: ServingConfig) -> tuple[int, int]:
    """The replicas' (fewest, most): minWorkers and maxWorkers, at least one; none when both are 0 (a model scaled to 0
    workers, as TorchServe scales it)."""
    if not serving.workers and not serving.max_workers:
        return 0, 0
    low = serving.workers or 1
    return low, serving.max_workers or low


def batch_settings(config: dict) -> tuple[int, float]:
    """``@serve.batch``'s max_batch_size and batch_wait_timeout_s from batchSize and maxBatchDelay (ms; below 0, as
    TorchServe's JSON register call writes when it gives none: no wait)."""
    serving = ServingConfig.from_model_config(config)
    return serving.batch_size or 1, max(serving.max_batch_delay, 0) / 1000
