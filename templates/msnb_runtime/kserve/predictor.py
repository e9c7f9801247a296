"""KServe's own Python model server serving TorchServe model folders: one ``kserve.Model`` per folder, loaded as a
TorchServe worker loads it (TorchServe's loader, ``msnb_runtime.ts.model_loader.TsModelLoader``: the manifest's handler, its
``initialize``, the ``Context`` with the model-config), answering KServe's v1 protocol (``POST
/v1/models/NAME:predict`` and ``:explain``, ``{"instances": [...]}``) and v2 protocol (``POST /v2/models/NAME/infer``)
through TorchServe's own KServe envelopes (``kserve``, ``kservev2``) around the handler: the handler sees what it
sees on TorchServe's KServe runtime.

``msnb export A.mar --kserve-python OUT`` writes it beside the model folders; from OUT, ``python
kserve_predictor.py`` serves every folder there (KServe's ModelServer arguments: ``--http_port``, ``--grpc_port``,
``--enable_grpc``, ...). Depends on kserve, TorchServe's ``ts``, handler.names (beside it) and the standard library,
never on msnb.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import kserve
from kserve.protocol.infer_type import InferRequest, InferResponse
from ts.model_loader import TsModelLoader
from ts.service import Service
from ts.torch_handler.request_envelope.kserve import KServeEnvelope
from ts.torch_handler.request_envelope.kservev2 import KServev2Envelope

from ..handler.names import MANIFEST


class TorchServeModel(kserve.Model):
    """One TorchServe model folder as a KServe model named after its manifest's modelName."""

    def __init__(self, folder: Path):
        self.folder = folder.resolve()
        self.manifest = json.loads((self.folder / MANIFEST).read_text())
        super().__init__(self.manifest["model"]["modelName"])
        self.service: Any = None
        self.v1: Any = None
        self.v2: Any = None

    def load(self) -> bool:
        """The folder as a worker's cwd and first import path, then TorchServe's loader (``initialize`` runs)."""
        os.chdir(self.folder)
        sys.path.insert(0, str(self.folder))
        model = self.manifest["model"]
        self.service = TsModelLoader().load(self.name, str(self.folder), model.get("handler"), None, 1)
        entry = self.service._entry_point
        self.v1, self.v2 = KServeEnvelope(entry).handle, KServev2Envelope(entry).handle
        self.ready = True
        return self.ready

    def answer(self, handle: Any, body: Any, headers: dict | None) -> Any:
        """``handle`` (an envelope around the handler) on one request, with the context a worker gives it."""
        request = {
            "requestId": str(uuid.uuid4()).encode(),
            "parameters": [{"name": "body", "value": body, "contentType": "application/json"}],
            "headers": [{"name": k.encode(), "value": str(v).encode()} for k, v in (headers or {}).items()],
        }
        processors, batch, ids = Service.retrieve_data_for_inference([request])
        self.service.context.request_ids, self.service.context.request_processor = ids, processors
        return handle(batch, self.service.context)[0]

    def predict(self, payload: Any, headers: dict | None = None, response_headers: dict | None = None) -> Any:
        if isinstance(payload, InferRequest):  # v2: the REST form of the request through TorchServe's kservev2
            body, _ = payload.to_rest()
            return InferResponse.from_rest(self.answer(self.v2, body, headers))
        return self.answer(self.v1, payload, headers)

    def explain(self, payload: Any, headers: dict | None = None) -> Any:
        return self.answer(self.v1, payload, {**(headers or {}), "explain": "True"})


def models(root: Path) -> list[TorchServeModel]:
    """A model per folder of ``root`` that holds a manifest, each loaded."""
    found = [TorchServeModel(p) for p in sorted(root.iterdir()) if (p / MANIFEST).is_file()]
    for model in found:
        model.load()
    return found


def serve(root: Path) -> None:
    """KServe's ModelServer over the model folders of ``root`` (its arguments from the command line)."""
    kserve.ModelServer().start(models(root))
