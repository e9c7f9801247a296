"""TorchServe's management API for the local Ray, on its own address: list, describe, register, scale, set-default
and unregister answered as TorchServe answers them (statuses, JSON shapes, the messages a script reads).

A thread of the process that owns the Ray (stdlib ``ThreadingHTTPServer``, loopback only); every call needs the
management key of the engine's key file unless token authorisation is off, as on TorchServe.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from msnb.engines.ray.describe import describe
from msnb.engines.ray.model_registry import Registry, RegistryError
from msnb.engines.ray.ts_params import RUNTIMES, java_flag, register_request, scale_request
from msnb.errors import MsnbError
from msnb.templates.msnb_runtime.api import hosts
from msnb.templates.msnb_runtime.ray.management import MANAGEMENT_PATHS, NOT_ALLOWED, NOT_FOUND, page
from msnb.templates.msnb_runtime.ray.management import api_description as described_api

NO_WORKERS = ". Use scale workers API to add workers for the model."
AUTH_FAILED = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
Answer = tuple[int, Any]


class Management:
    """The API's calls over a ``Registry``: each takes the path's parts and the query, and returns (status, body)."""

    def __init__(self, registry: Registry, model_api: bool, key: str | None):
        self.registry, self.model_api, self.key = registry, model_api, key

    def answer(
        self, method: str, path: str, query: dict[str, str], token: str, body: bytes = b"", content_type: str = ""
    ) -> Answer:
        """TorchServe's ``ManagementRequestHandler``: its routes, in its order, and its refusals."""
        if self.key is not None and token != f"Bearer {self.key}":
            return error(400, "InvalidKeyException", AUTH_FAILED)  # TorchServe 0.12 answers 400, not 401
        parts = [p for p in path.split("/") if p]
        other = self.other(method, parts)
        if other is not None:
            return other
        call = self.route(method, parts)
        if call is None:
            return error(405, "MethodNotAllowedException", NOT_ALLOWED)
        if (call == self.register or method == "DELETE") and not self.model_api:
            return error(405, "MethodNotAllowedException", NOT_ALLOWED)
        try:
            if call == self.register:
                return self.register(query, body, content_type)
            return call(parts[1:], query)
        except RegistryError as err:  # TorchServe's words; msnb's own with their Hint
            return error(err.status, err.kind, err.render(details=False))
        except MsnbError as err:  # replicas that did not start (a scale, a set-default): TorchServe's 500
            return error(500, "InternalServerException", err.render(details=False))

    def other(self, method: str, parts: list[str]) -> Answer | None:
        """The answers outside ``/models``: the API's description, KServe v1's readiness, the (empty) workflow list,
        TorchServe's 404 for any other path; None for a models call."""
        if method == "OPTIONS" and not parts or parts == ["api-description"]:
            return 200, api_description()
        if len(parts) == 3 and parts[:2] == ["v1", "models"]:
            return (
                self.ready(parts[2].split(":")[0])
                if method == "GET"
                else error(405, "MethodNotAllowedException", NOT_ALLOWED)
            )
        if parts == ["workflows"] and method == "GET":
            return 200, {"workflows": []}  # msnb serves no workflow
        models = parts[:1] == ["models"] and len(parts) <= 3 or len(parts) == 4 and parts[3] == "set-default"
        return None if models or not parts else error(404, "ResourceNotFoundException", NOT_FOUND)

    def route(self, method: str, parts: list[str]):
        """The call a models path takes, as TorchServe routes it (GET on ``.../set-default`` describes the default
        version, DELETE on it unregisters it); None: a method it does not take."""
        if len(parts) <= 1:
            return {"GET": self.list, "POST": self.register}.get(method) if parts else None
        if len(parts) == 4 and method == "PUT":
            return self.set_default
        calls = {"GET": self.describe, "PUT": self.scale, "DELETE": self.unregister, "OPTIONS": self.openapi}
        call = calls.get(method)
        if call is not None and len(parts) == 4:  # TorchServe reads no version from a path this long
            return lambda parts, query: call(parts[:1], query)
        return call

    def list(self, _: list[str], query: dict[str, str]) -> Answer:
        return page([(n, e.url) for n, e in self.registry.entries.items()], query)

    def describe(self, parts: list[str], query: dict[str, str]) -> Answer:
        version = parts[1] if len(parts) > 1 else None
        entries = self.registry.versions(parts[0], version)
        customized = version != "all" and java_flag(query.get("customized"))  # TorchServe's /all ignores it
        idle = self.registry.idle() if customized else frozenset()
        return 200, [describe(self.registry.engine, entry, customized, entry.app in idle) for entry in entries]

    def openapi(self, parts: list[str], _: dict[str, str]) -> Answer:
        self.registry.entry(parts[0], parts[1] if len(parts) > 1 else None)  # 404 for a model not registered
        return 200, api_description()

    def ready(self, name: str) -> Answer:
        """KServe v1's model readiness, as TorchServe answers it on the management address."""
        try:
            entry = self.registry.entry(name)
        except RegistryError:
            return error(404, "ModelNotFoundException", f"Model not found: {name}")
        return 200, {"name": name, "ready": entry.running}

    def register(self, query: dict[str, str], body: bytes = b"", content_type: str = "") -> Answer:
        workers = self.registry.config.number("default_workers_per_model")
        request = register_request(query, body, content_type, workers)
        if request.url is None:
            return error(400, "BadRequestException", "Parameter url is required.")
        if request.runtime is not None and request.runtime not in RUNTIMES:
            return error(400, "BadRequestException", f"Invalid RuntimeType value: {request.runtime}")
        status = self.registry.register(request.url, request.model_name or None, request)
        if status is None:  # not synchronous: its replicas start in the background
            return 202, {"status": "Processing worker updates..."}
        workers = len(status.workers)
        said = f'Model "{status.name}" Version: {status.version} registered with {workers} initial workers'
        return 200, {"status": said + (NO_WORKERS if not workers else "")}

    def scale(self, parts: list[str], query: dict[str, str]) -> Answer:
        """TorchServe's ``handleScaleModel`` and ``ApiUtils.updateModelWorkers``, their checks in their order."""
        name, version = parts[0], parts[1] if len(parts) > 1 else query.get("model_version")
        low, high, synchronous = scale_request(query)
        if high < low:
            return error(400, "BadRequestException", "max_worker cannot be less than min_worker.")
        self.registry.entry(name, version)  # 404 before anything starts
        if low < 0:  # TorchServe's WorkLoadManager indexes its worker list with it
            return error(500, "IndexOutOfBoundsException", f"Index {low} out of bounds for length 0")
        if not synchronous:
            threading.Thread(target=self.registry.scale, args=(name, version, low, high), daemon=True).start()
            return 202, {"status": "Processing worker updates..."}
        self.registry.scale(name, version, low, high)
        named = f"{name}, version: {version}" if version else name  # TorchServe names the version asked for
        return 200, {"status": f"Workers scaled to {low} for model: {named}"}

    def set_default(self, parts: list[str], _: dict[str, str]) -> Answer:
        try:
            entry = self.registry.set_default(parts[0], parts[1])
        except RegistryError as err:  # TorchServe words this one without colons
            if err.kind != "ModelVersionNotFoundException":
                raise
            return error(404, err.kind, f"Model version {parts[1]} does not exist for model {parts[0]}")
        return 200, {"status": f'Default version successfully updated for model "{entry.name}" to "{entry.version}"'}

    def unregister(self, parts: list[str], _: dict[str, str]) -> Answer:
        entry = self.registry.unregister(parts[0], parts[1] if len(parts) > 1 else None)
        return 200, {"status": f'Model "{entry.name}" unregistered'}


def api_description() -> dict:
    """The management API's description, as TorchServe's ``OPTIONS /`` (OpenAPI 3): its calls' paths."""
    return described_api(MANAGEMENT_PATHS)


def error(status: int, kind: str, message: str) -> Answer:
    """TorchServe's error body."""
    return status, {"code": status, "type": kind, "message": message}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length) if length else b""
        refusal = hosts.refused(self.server.allowed, {k.lower(): v for k, v in self.headers.items()})
        if refusal:
            return self._send(refusal[0], error(*refusal)[1])  # a register call's JSON body, as TorchServe reads it
        status, body = self.server.api.answer(
            self.command,
            parts.path,
            query,
            self.headers.get("Authorization", ""),
            sent,
            self.headers.get("Content-Type", ""),
        )
        self._send(status, body)

    def _send(self, status: int, body: Any) -> None:
        data = (json.dumps(body, indent=2) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_HEAD = _answer

    def log_message(self, *args: Any) -> None:  # no access log on the owner's terminal
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: Management
    allowed: hosts.AllowedHosts


def serve(api: Management, host: str, port: int, allowed: str = "") -> _Server:
    """``api`` answering on ``host:port`` in a thread until ``.shutdown()``, to requests that name a host it
    ``allowed`` (api.hosts: loopback's names, and those of the list off loopback)."""
    server = _Server((host, port), _Handler)
    server.api, server.allowed = api, hosts.for_address(host, allowed)
    threading.Thread(target=server.serve_forever, name="msnb-management", daemon=True).start()
    return server


__all__ = ["Management", "serve"]
