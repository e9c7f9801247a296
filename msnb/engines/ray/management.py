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
from msnb.errors import MsnbError
from msnb.templates.msnb_runtime.ray.management import NOT_ALLOWED, page
from msnb.templates.msnb_runtime.ray.management import number as _number

NOT_FOUND = "Requested resource is not found, please refer to API document."
AUTH_FAILED = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
Answer = tuple[int, Any]


class Management:
    """The API's calls over a ``Registry``: each takes the path's parts and the query, and returns (status, body)."""

    def __init__(self, registry: Registry, model_api: bool, key: str | None):
        self.registry, self.model_api, self.key = registry, model_api, key

    def answer(self, method: str, path: str, query: dict[str, str], token: str) -> Answer:
        if self.key is not None and token != f"Bearer {self.key}":
            return error(400, "InvalidKeyException", AUTH_FAILED)  # TorchServe 0.12 answers 400, not 401
        parts = [p for p in path.split("/") if p]
        if not parts or parts[0] != "models" or len(parts) > 4:
            return error(404, "ResourceNotFoundException", NOT_FOUND)
        route = {
            ("GET", 1): self.list,
            ("POST", 1): self.register,
            ("GET", 2): self.describe,
            ("GET", 3): self.describe,
            ("PUT", 2): self.scale,
            ("PUT", 3): self.scale,
            ("PUT", 4): self.set_default,
            ("DELETE", 2): self.unregister,
            ("DELETE", 3): self.unregister,
        }
        call = route.get((method, len(parts)))
        if call is None or (len(parts) == 4 and parts[3] != "set-default"):
            if call is None and len(parts) <= 3:
                return error(405, "MethodNotAllowedException", NOT_ALLOWED)
            return error(404, "ResourceNotFoundException", NOT_FOUND)
        if call in (self.register, self.unregister) and not self.model_api:
            return error(405, "MethodNotAllowedException", NOT_ALLOWED)
        try:
            return call(parts[1:], query)
        except RegistryError as err:  # TorchServe's words; msnb's own with their Hint
            return error(err.status, err.kind, err.render(details=False))
        except ValueError as err:
            return error(400, "BadRequestException", str(err))
        except MsnbError as err:  # replicas that did not start (a scale, a set-default): TorchServe's 500
            return error(500, "InternalServerException", err.render(details=False))

    def list(self, _: list[str], query: dict[str, str]) -> Answer:
        return page([(n, e.url) for n, e in self.registry.entries.items()], query)

    def describe(self, parts: list[str], query: dict[str, str]) -> Answer:
        entries = self.registry.versions(parts[0], parts[1] if len(parts) > 1 else None)
        customized = query.get("customized", "false").lower() == "true"
        return 200, [describe(self.registry.engine, entry, customized) for entry in entries]

    def register(self, _: list[str], query: dict[str, str]) -> Answer:
        url = query.get("url")
        if not url:
            return error(400, "BadRequestException", "Parameter url is required.")
        settings = {
            k: _number(query, k) for k in ("initial_workers", "batch_size", "max_batch_delay", "response_timeout")
        }
        status = self.registry.register(url, query.get("model_name") or None, settings)
        workers = len(status.workers)
        return 200, {
            "status": f'Model "{status.name}" Version: {status.version} registered with {workers} initial workers'
        }

    def scale(self, parts: list[str], query: dict[str, str]) -> Answer:
        name, version = parts[0], parts[1] if len(parts) > 1 else None
        low, high = _number(query, "min_worker"), _number(query, "max_worker")
        self.registry.entry(name, version)  # 404 before anything starts
        if query.get("synchronous", "false").lower() != "true":
            threading.Thread(target=self.registry.scale, args=(name, version, low, high), daemon=True).start()
            return 202, {"status": "Processing worker updates..."}
        status = self.registry.scale(name, version, low, high)
        named = f"{name}, version: {version}" if version else name  # TorchServe names the version asked for
        return 200, {"status": f"Workers scaled to {len(status.workers)} for model: {named}"}

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


def error(status: int, kind: str, message: str) -> Answer:
    """TorchServe's error body."""
    return status, {"code": status, "type": kind, "message": message}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # TorchServe takes the register parameters from the query
        status, body = self.server.api.answer(self.command, parts.path, query, self.headers.get("Authorization", ""))
        data = (json.dumps(body, indent=2) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:  # no access log on the owner's terminal
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: Management


def serve(api: Management, host: str, port: int) -> _Server:
    """``api`` answering on ``host:port`` in a thread until ``.shutdown()``."""
    server = _Server((host, port), _Handler)
    server.api = api
    threading.Thread(target=server.serve_forever, name="msnb-management", daemon=True).start()
    return server


__all__ = ["Management", "serve"]
