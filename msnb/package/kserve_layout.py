"""KServe's TorchServe layout of model folders: ROOT/model-store/<name>.mar and ROOT/config/config.properties (every
batchSize 1, see KSERVE_BATCH_NOTE), and what to tell a user about it (a batch size, an example that is not a tensor)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from msnb.engines.torchserve.config import (
    KSERVE_CONFIG_DIR,
    KSERVE_MODEL_STORE,
    KSERVE_MOUNT,
    KSERVE_STORE_DIR,
    Limits,
    kserve_properties,
    render_properties,
)
from msnb.errors import BuildError
from msnb.files import DISK_ERRNOS, disk_error, link_or_copy, move_into
from msnb.package import archive, formats
from msnb.package.model_folder import ModelFolder
from msnb.spec import HandlerSpec
from msnb.templates.msnb_runtime.handler.serving import FRONTEND_KEYS

Packable = HandlerSpec | ModelFolder  # a staged folder, or a spec whose folder is staged to pack it


def spec_of(item: Packable) -> HandlerSpec:
    return item.spec if isinstance(item, ModelFolder) else item


def warnings_for(items: list[Packable]) -> list[str]:
    """What a KServe layout of ``items`` changes or needs: a batch size set to 1, an example that is not a tensor."""
    specs = [spec_of(i) for i in items]
    return [f"{s.name}: {KSERVE_BATCH_NOTE.format(n=s.batch_size)}" for s in specs if s.batch_size > 1] + [
        f"{s.name}: {v2_note(s.example)}" for s in specs if not is_tensor(s.example)
    ]


def write_kserve(
    items: list[Packable],
    root: Path,
    fmt: str = formats.EXPORT_FORMAT,
    built: dict[str, Path] | None = None,
    limits: Limits | None = None,
) -> Path:
    """KServe's TorchServe layout: ROOT/model-store/<name>.mar and ROOT/config/config.properties.

    Everything is built in a hidden staging folder first and moved into place only when all
    archives built, so a failure leaves ROOT as it was. An archive already ``built`` (name -> .mar,
    the -o copy) is linked (or copied), not built again.
    """
    specs = [spec_of(i) for i in items]
    _refuse_streaming(specs)
    root.mkdir(parents=True, exist_ok=True)
    for sub in (KSERVE_STORE_DIR, KSERVE_CONFIG_DIR):
        if (root / sub).exists() and not (root / sub).is_dir():
            raise write_error(root, NotADirectoryError(f"{sub} is a file, not a folder"))
    staging = Path(tempfile.mkdtemp(prefix=".msnb-kserve-", dir=root))
    try:
        archives = [
            _reuse(built[s.name], staging) if s.name in (built or {}) else archive.pack_or_build(item, staging, fmt)
            for item, s in zip(items, specs)
        ]
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


def _refuse_streaming(specs: list[HandlerSpec]) -> None:
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


def _reuse(path: Path, staging: Path) -> Path:
    link_or_copy(path, staging / path.name)
    return staging / path.name


def write_error(folder: Path, err: OSError) -> BuildError:
    if err.errno in DISK_ERRNOS:  # full disk, read-only, no permission: free space or choose another folder
        return disk_error(folder, err)
    return BuildError(
        f"Cannot write into {str(folder.resolve())!r}: {err}.",
        "check what is already there (a file where a folder goes, or the reverse) and its permissions.",
    )


def kserve_config(specs: list[HandlerSpec], model_store: str = KSERVE_MODEL_STORE, limits: Limits | None = None) -> str:
    """config.properties for KServe's TorchServe runtime (see ``kserve_properties``); every batchSize is 1
    (see KSERVE_BATCH_NOTE)."""
    models = {
        spec.name: {spec.version: {"defaultVersion": True, "marName": f"{spec.name}.mar", **_snapshot(spec)}}
        for spec in specs
    }
    where = f"{KSERVE_MOUNT}/{KSERVE_CONFIG_DIR}/"
    header = f"# Written by `msnb export --kserve`: KServe's TorchServe runtime reads it from {where}.\n" + SECRETS_NOTE
    return render_properties(kserve_properties(models, model_store, limits), header)


def _snapshot(spec: HandlerSpec) -> dict:
    cfg = spec.model_config()
    return {k: cfg[k] for k in FRONTEND_KEYS if k != "deviceType"} | {"batchSize": 1}


# Where a served model's key comes from on KServe: never this folder (msnb refuses secrets in archives; docs/hardening.md).
SECRETS_NOTE = (
    '# A handler reads a key from its environment (os.environ["OPENAI_API_KEY"]); on KServe it comes from a Kubernetes\n'
    "# Secret: the InferenceService's spec.predictor.model.env: [{name: OPENAI_API_KEY, valueFrom: {secretKeyRef:\n"
    "# {name: SECRET, key: KEY}}}]. Never put it in this folder.\n"
)
