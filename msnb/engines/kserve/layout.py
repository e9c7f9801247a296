"""KServe's TorchServe layout of model folders: ROOT/model-store/<name>.mar and ROOT/config/config.properties (every
batchSize 1, see KSERVE_BATCH_NOTE), and what to tell a user about it (a batch size, an example that is not a tensor).

The handlers come as data (``Described``: what a ``HandlerSpec`` says of itself) and their archives from a call the
caller gives (``pack``: msnb's packaging writes them): this module builds no archive of its own.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from msnb.engines.kserve import KSERVE_CONFIG_DIR, KSERVE_MODEL_STORE, KSERVE_MOUNT, KSERVE_STORE_DIR
from msnb.engines.models import Limits
from msnb.engines.torchserve.config import METRICS_PROPERTIES, render_properties
from msnb.errors import BuildError
from msnb.files import move_into, write_error
from msnb.templates.msnb_runtime.handler.serving import FRONTEND_KEYS


class Described(Protocol):
    """What the layout reads of a handler (a ``msnb.spec.HandlerSpec`` is one)."""

    name: str
    version: str
    batch_size: int
    example: Any
    streaming: tuple[str, ...]

    def model_config(self) -> dict: ...


def warnings_for(specs: list[Described]) -> list[str]:
    """What a KServe layout of ``specs`` changes or needs: a batch size set to 1, an example that is not a tensor."""
    return [f"{s.name}: {KSERVE_BATCH_NOTE.format(n=s.batch_size)}" for s in specs if s.batch_size > 1] + [
        f"{s.name}: {v2_note(s.example)}" for s in specs if not is_tensor(s.example)
    ]


def write_kserve(
    specs: list[Described], root: Path, pack: Callable[[Path], list[Path]], limits: Limits | None = None
) -> Path:
    """KServe's TorchServe layout: ROOT/model-store/<name>.mar and ROOT/config/config.properties; ``pack(staging)``
    writes the archives of ``specs`` into ``staging`` and returns their paths.

    Everything is built in a hidden staging folder first and moved into place only when all
    archives built, so a failure leaves ROOT as it was.
    """
    _refuse_streaming(specs)
    root.mkdir(parents=True, exist_ok=True)
    for sub in (KSERVE_STORE_DIR, KSERVE_CONFIG_DIR):
        if (root / sub).exists() and not (root / sub).is_dir():
            raise write_error(root, NotADirectoryError(f"{sub} is a file, not a folder"))
    staging = Path(tempfile.mkdtemp(prefix=".msnb-kserve-", dir=root))
    try:
        archives = pack(staging)
        (staging / "config.properties").write_text(kserve_config(specs, limits=limits))
        (root / KSERVE_STORE_DIR).mkdir(exist_ok=True)
        (root / KSERVE_CONFIG_DIR).mkdir(exist_ok=True)
        for path in archives:
            move_into(path, root / KSERVE_STORE_DIR)
        move_into(staging / "config.properties", root / KSERVE_CONFIG_DIR)
        return root
    except OSError as err:
        raise write_error(root, err) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refuse_streaming(specs: list[Described]) -> None:
    """KServe's v1 and v2 protocols answer a request with one JSON document (``predictions`` / ``outputs``), which
    TorchServe's KServe envelopes build from the handler's whole return value: no stream can travel in them."""
    streaming = [
        f"{s.name} ({' and '.join(s.streaming)} yield{'s' if len(s.streaming) == 1 else ''})"
        for s in specs
        if s.streaming
    ]
    if streaming:
        raise BuildError(
            f"--kserve cannot carry streamed answers: {', '.join(streaming)}. KServe's v1/v2 protocols answer each "
            "request with one JSON document (predictions / outputs), built from the handler's whole answer.",
            "serve a streaming handler on TorchServe's own inference API (msnb export -o DIR, then msnb serve DIR) or "
            "on Ray Serve (--ray); for KServe, export a variant whose inference and postprocess return instead of "
            "yield.",
        )


# KServe's envelopes (kserve for v1, kservev2 for v2) in TorchServe 0.12 read only the first request of a
# batch and answer it alone: a batch of two requests fails both with 503 "number of batch response
# mismatched" (measured). A KServe request batches its own instances; across requests batchSize must be 1.
KSERVE_BATCH_NOTE = (
    "--batch-size {n} is set to 1 in the KServe config: TorchServe's KServe envelopes answer only "
    "the first request of a batch (503 for all of them otherwise). The instances of one "
    "KServe request still share one forward pass."
)


def is_tensor(example: Any) -> bool:
    """True when ``example`` can be sent as one KServe v2 tensor: a number or a regular nested list of them
    (None, no example, counts as fine: there is nothing to warn about)."""
    if example is None:
        return True
    if isinstance(example, str) or not isinstance(example, (bool, int, float, list)):
        return False
    try:
        torch.tensor(example)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return False
    return True


def v2_note(example: Any) -> str:
    """What to send over KServe v2 for an --example that is not a tensor (the shared handler decodes it)."""
    kind = {dict: "object", list: "array", str: "string"}.get(type(example), type(example).__name__)
    text = json.dumps(example if isinstance(example, str) else json.dumps(example))
    shown = text if len(text) <= 60 else text[:56] + '..."'
    return (
        f"its --example (a JSON {kind}) is not a tensor, which KServe v2 (protocolVersion: v2) sends. Send it "
        f'as a BYTES input holding its JSON text: {{"inputs": [{{"name": "input-0", "shape": [1], "datatype": '
        f'"BYTES", "data": [{shown}]}}]}}; the shared handler decodes it. v1 takes it as it is.'
    )


def kserve_config(specs: list[Described], model_store: str = KSERVE_MODEL_STORE, limits: Limits | None = None) -> str:
    """config.properties for KServe's TorchServe runtime (see ``kserve_properties``); every batchSize is 1
    (see KSERVE_BATCH_NOTE)."""
    models = {
        spec.name: {spec.version: {"defaultVersion": True, "marName": f"{spec.name}.mar", **_snapshot(spec)}}
        for spec in specs
    }
    where = f"{KSERVE_MOUNT}/{KSERVE_CONFIG_DIR}/"
    header = f"# Written by `msnb export --kserve`: KServe's TorchServe runtime reads it from {where}.\n" + SECRETS_NOTE
    return render_properties(kserve_properties(models, model_store, limits), header)


def kserve_properties(
    snapshot_models: dict, model_store: str = KSERVE_MODEL_STORE, limits: Limits | None = None
) -> dict:
    """config.properties of KServe's TorchServe runtime, which starts
    ``torchserve --start --model-store=/mnt/models/model-store --ts-config=/mnt/models/config/config.properties``
    (KSERVE_MOUNT, KSERVE_STORE_DIR and KSERVE_CONFIG_DIR).

    Followed: pytorch/serve kubernetes/kserve/config.properties and the KServe TorchServe docs
    (inference and management on 8085 because KServe's wrapper takes 8080, metrics on 8082,
    gRPC 7070/7071, model_snapshot, enable_envvars_config=true so the TS_SERVICE_ENVELOPE
    variable KServe sets from the InferenceService's protocolVersion, kserve for v1 or
    kservev2 for v2, reaches TorchServe; service_envelope is therefore not fixed here).
    Token authorisation is off: KServe's wrapper and readiness probe send no token (pytorch/serve#3301).
    ``snapshot_models``: name -> {version -> snapshot entry (marName, workers, batchSize, ...)}.
    """
    snapshot = {"name": "startup.cfg", "modelCount": len(snapshot_models), "models": snapshot_models}
    return {
        "inference_address": "http://0.0.0.0:8085",
        "management_address": "http://0.0.0.0:8085",
        "metrics_address": "http://0.0.0.0:8082",
        "grpc_inference_port": 7070,
        "grpc_management_port": 7071,
        "enable_envvars_config": "true",
        "install_py_dep_per_model": "true",
        "enable_metrics_api": "true",
        **METRICS_PROPERTIES,
        "number_of_netty_threads": 4,
        "job_queue_size": 10,
        "disable_token_authorization": "true",
        "load_models": "all",
        "model_store": model_store,
        "model_snapshot": json.dumps(snapshot, separators=(",", ":")),
        **(limits or Limits()).properties(),
    }


def _snapshot(spec: Described) -> dict:
    cfg = spec.model_config()
    return {k: cfg[k] for k in FRONTEND_KEYS if k != "deviceType"} | {"batchSize": 1}


# Where a served model's key comes from on KServe: never this folder (msnb refuses secrets in archives; docs/hardening.md).
SECRETS_NOTE = (
    '# A handler reads a key from its environment (os.environ["OPENAI_API_KEY"]); on KServe it comes from a Kubernetes\n'
    "# Secret: the InferenceService's spec.predictor.model.env: [{name: OPENAI_API_KEY, valueFrom: {secretKeyRef:\n"
    "# {name: SECRET, key: KEY}}}]. Never put it in this folder.\n"
)
