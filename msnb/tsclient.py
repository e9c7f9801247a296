"""HTTP to one TorchServe: the right token on every call, renewed before it expires."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

from msnb.errors import ServerError

RENEW_MARGIN_S = 300.0  # renew a key 5 min before it expires (half its life for short-lived keys)


class Keys:
    """TorchServe's token keys, read from key_file.json in the server's start directory."""

    def __init__(self, key_file: Path, management_url: str, enabled: bool = True):
        self.key_file = Path(key_file)
        self.management_url = management_url
        self.enabled = enabled
        self._keys: dict = {}
        self._expires: dict[str, float] = {}
        self._lifetime: dict[str, float] = {}
        self._lock = threading.Lock()

    def ready(self) -> bool:
        """Whether the server has written its key file yet (always true when auth is off)."""
        return not self.enabled or self._load()

    def header(self, kind: str) -> dict[str, str]:
        if not self.enabled or kind == "none":
            return {}
        with self._lock:
            if not self._keys and not self._load():
                raise ServerError(f"TorchServe has not written {self.key_file} (token auth is on).",
                                  "wait for the server to start, or restart it with server.start().")
            remaining = self._expires.get(kind, float("inf")) - time.time()
            if remaining < min(RENEW_MARGIN_S, self._lifetime.get(kind, 0) / 2):
                self._renew(kind)
            return {"Authorization": f"Bearer {self._keys[kind]['key']}"}

    def renew(self, kind: str) -> None:
        with self._lock:
            self._renew(kind)

    def _renew(self, kind: str) -> None:
        # POST /token?type=... with the API key (which never expires) makes a new key and rewrites key_file.json.
        api_key = self._keys["API"]["key"]
        resp = requests.post(f"{self.management_url}/token", params={"type": kind},
                             headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
        if resp.status_code != 200:
            raise ServerError(f"Could not renew TorchServe's {kind} key: HTTP {resp.status_code} {resp.text[:200]}.",
                              "restart the server (server.stop(); server.start()).")
        self._load()

    def _load(self) -> bool:
        try:
            keys = json.loads(self.key_file.read_text())
        except (OSError, ValueError):
            return False
        now = time.time()
        for kind in ("inference", "management"):
            expires = _parse_time(keys[kind]["expiration time"])
            if keys[kind]["key"] != self._keys.get(kind, {}).get("key"):
                self._lifetime[kind] = expires - now
            self._expires[kind] = expires
        self._keys = keys
        return True


def _parse_time(text: str) -> float:
    # "2026-11-22T07:26:35.796110540Z": Java writes nanoseconds, Python parses at most microseconds.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


class Client:
    """A requests session that authorises each call and turns connection failures into ServerError."""

    def __init__(self, keys: Keys, pool_size: int = 32):
        self.keys = keys
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size)
        self.session.mount("http://", adapter)

    def call(self, method: str, url: str, kind: str, *, timeout: float | None = 60.0, **kwargs) -> requests.Response:
        for attempt in (1, 2):
            headers = {**kwargs.pop("headers", {}), **self.keys.header(kind)}
            try:
                resp = self.session.request(method, url, headers=headers, timeout=timeout, **kwargs)
            except requests.Timeout:
                raise ServerError(f"TorchServe did not answer {method} {url} within {timeout} s.",
                                  "pass a larger timeout=, or check the worker log (server.log_tail()).") from None
            except requests.ConnectionError as err:
                raise ServerError(f"Cannot reach TorchServe at {url}: {err.__class__.__name__}.",
                                  "is the server running? Start it with server.start().") from None
            if attempt == 1 and resp.status_code == 400 and "InvalidKeyException" in resp.text and self.keys.enabled:
                self.keys.renew(kind)  # the key expired between our check and the call
                kwargs["headers"] = {k: v for k, v in headers.items() if k != "Authorization"}
                continue
            return resp
        return resp

    def close(self) -> None:
        self.session.close()
