"""TorchServe's handler ``Context`` where no TorchServe worker builds it (a Ray Serve replica, any engine that is not
TorchServe): manifest, system properties, request headers, per-request status and headers, and the worker's socket
that a handler's intermediate responses are written to.

TorchServe's own ``msnb_runtime.ts.context.Context`` is used when ``ts`` is importable; otherwise a class with the same API.
Depends on the standard library, never on msnb.
"""

from __future__ import annotations

import os
from typing import Any

from .wire import predict_responses

try:  # TorchServe's own classes, when it is installed on the Ray node
    from ts.context import Context, RequestProcessor
except ImportError:

    class RequestProcessor:
        """One request's headers in, its status and response headers out (TorchServe's API)."""

        def __init__(self, request_header: dict) -> None:
            self._status_code, self._reason_phrase = 200, None
            self._response_header: dict[str, str] = {}
            self._request_header = request_header

        def get_request_property(self, key: str) -> str | None:
            return self._request_header.get(key)

        def get_request_properties(self) -> dict:
            return self._request_header

        def report_status(self, code: int, reason_phrase: str | None = None) -> None:
            self._status_code, self._reason_phrase = code, reason_phrase

        def get_response_status_code(self) -> int:
            return self._status_code

        def get_response_status_phrase(self) -> str | None:
            return self._reason_phrase

        def add_response_property(self, key: str, value: str) -> None:
            self._response_header[key] = value

        def get_response_headers(self) -> dict:
            return self._response_header

    class Context:
        """The subset of ``msnb_runtime.ts.context.Context`` handlers use, with the same names and signatures."""

        def __init__(self, model_name, model_dir, manifest, batch_size, gpu, mms_version, metrics=None, **kw):
            self.model_name, self.manifest, self.metrics = model_name, manifest, metrics
            self.model_yaml_config = kw.get("model_yaml_config")
            self.system_properties = {
                "model_dir": model_dir,
                "gpu_id": gpu,
                "batch_size": batch_size,
                "server_name": "MMS",
                "server_version": mms_version,
                "limit_max_image_pixels": True,
            }
            self.request_ids, self.request_processor = None, None

        def get_request_id(self, idx: int = 0) -> str | None:
            return None if self.request_ids is None else self.request_ids.get(idx)

        def get_sequence_id(self, idx: int) -> str | None:
            return self.get_request_header(idx, "ts_request_sequence_id")

        def get_request_header(self, idx: int, key: str) -> str | None:
            return self.request_processor[idx].get_request_property(key)

        def get_all_request_header(self, idx: int) -> dict:
            return self.request_processor[idx].get_request_properties()

        def set_response_content_type(self, idx: int, value: str) -> None:
            self.set_response_header(idx, "content-type", value)

        def get_response_content_type(self, idx: int) -> str | None:
            return self.get_response_headers(idx).get("content-type")

        def get_response_status(self, idx: int) -> tuple:
            proc = self.request_processor[idx]
            return proc.get_response_status_code(), proc.get_response_status_phrase()

        def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
            if self.request_processor is not None and self.request_processor[idx] is not None:
                self.request_processor[idx].report_status(code, reason_phrase=phrase)

        def set_all_response_status(self, code: int = 200, phrase: str = "") -> None:
            for proc in self.request_processor:
                proc.report_status(code, reason_phrase=phrase)

        def get_response_headers(self, idx: int) -> dict:
            return self.request_processor[idx].get_response_headers()

        def set_response_header(self, idx: int, key: str, value: str) -> None:
            self.request_processor[idx].add_response_property(key, value)


# The server_version a handler reads in its context (Ray Serve was the first engine to build this Context).
SERVER_VERSION = "ray-serve"


def make_context(
    name: str, model_dir: str, manifest: dict, config: dict, batch_size: int, gpu_id: int | None, metrics: Any
) -> Any:
    """A handler context as a TorchServe worker builds it for ``model_dir`` (its manifest, model-config and batch
    size)."""
    try:
        context = Context(
            name, model_dir, manifest, batch_size, gpu_id, SERVER_VERSION, metrics=metrics, model_yaml_config=config
        )
    except TypeError:  # a TorchServe Context without model_yaml_config (older releases)
        context = Context(name, model_dir, manifest, batch_size, gpu_id, SERVER_VERSION, metrics=metrics)
        context.model_yaml_config = config
    context.cl_socket = ChunkSocket(context)
    return context


class ChunkSocket:
    """The worker's socket to the frontend as ``send_intermediate_predict_response`` writes to it: each intermediate
    response (TorchServe's binary predict response, ts/protocol/otf_message_handler.py) goes to the replica's
    ``context.msnb_send_chunks`` as each request's chunk (on Ray: ray.streaming), so it streams to its client."""

    def __init__(self, context: Any):
        self.context = context

    def sendall(self, message: bytes) -> None:
        send = getattr(self.context, "msnb_send_chunks", None)
        if send is None:
            raise RuntimeError("an intermediate response outside a prediction: there is no request to send it to")
        index = {request_id: idx for idx, request_id in (self.context.request_ids or {}).items()}
        pieces, types = {}, {}
        for request_id, ctype, body in predict_responses(bytes(message)):
            idx = index.get(request_id)
            if idx is not None:
                pieces[idx] = pieces.get(idx, b"") + body
                types[idx] = ctype or types.get(idx) or "text/plain"
        if pieces:
            send(pieces, types)


def set_requests(context: Any, headers: list[dict]) -> None:
    """Give the context one request processor per request of the batch (fresh statuses and headers)."""
    context.request_ids = {idx: f"{os.getpid()}-{idx}" for idx in range(len(headers))}
    context.request_processor = [RequestProcessor(dict(h)) for h in headers]
