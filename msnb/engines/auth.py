"""Token authorisation in TorchServe's format (key_file.json), for both engines: the keys, renewed before they
expire, on every HTTP call."""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

from msnb.errors import ServerError

RENEW_MARGIN_S = 300.0  # renew a key 5 min before it expires (half its life for short-lived keys)
NEVER = "9999-12-31T23:59:59Z"  # the expiry of keys that do not expire (an engine without key renewal)
KEY_FILE_HINT = (
    "pass the key the server checks: TorchServe's key_file.json (from the folder it started in), a JSON file "
    'holding {"inference": {"key": "..."}}, or a file holding the key alone (`msnb predict --token-file FILE`; in Python: token_file=FILE)'
)


class Keys:
    """TorchServe's token keys, read from key_file.json in the server's start directory."""

    def __init__(self, key_file: Path | None, management_url: str | None, enabled: bool = True):
        """``management_url`` None: keys are used as they are, never renewed (a server msnb did not start)."""
        self.key_file = Path(key_file) if key_file else None
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
                raise self._unreadable()
            remaining = self._expires.get(kind, float("inf")) - time.time()
            if self.management_url and remaining < min(RENEW_MARGIN_S, self._lifetime.get(kind, 0) / 2):
                self._renew(kind)
            return {"Authorization": f"Bearer {self._keys[kind]['key']}"}

    def renew(self, kind: str, rejected: Mapping[str, str]) -> None:
        """Renew the key that was sent in the ``rejected`` headers, unless another thread already did.

        TorchServe keeps one key per kind: renewing it again would reject the new key other threads sent.
        """
        with self._lock:
            if rejected.get("Authorization") == f"Bearer {self._keys.get(kind, {}).get('key')}":
                self._renew(kind)

    def _renew(self, kind: str) -> None:
        # POST /token?type=... with the API key (which never expires) makes a new key and rewrites key_file.json.
        if not self.management_url:
            raise ServerError(
                f"TorchServe refused the {kind} key from {self.key_file}.",
                "the key expired or belongs to another server: pass the server's current "
                "key_file.json with --token-file.",
            )
        api_key = self._keys["API"]["key"]
        try:
            resp = requests.post(
                f"{self.management_url}/token",
                params={"type": kind},
                headers={"Authorization": f"Bearer {api_key}"},
                timeout=10,
            )
        except requests.RequestException as err:
            raise ServerError(
                f"Could not renew TorchServe's {kind} key: {type(err).__name__}.",
                "is the server running? Restart it (server.stop(); server.start()).",
            ) from None
        if resp.status_code != 200:
            raise ServerError(
                f"Could not renew TorchServe's {kind} key: HTTP {resp.status_code} {resp.text[:200]}.",
                "restart the server (server.stop(); server.start()).",
            )
        self._load()

    def _unreadable(self) -> ServerError:
        """Why no key could be read: a server msnb started has not written its file yet; a file given by the user
        is missing or holds no key."""
        if self.management_url:
            return ServerError(
                f"TorchServe has not written {self.key_file} (token auth is on).",
                "wait for the server to start, or restart it with server.start().",
            )
        problem = "does not exist" if not self.key_file.exists() else "holds no key msnb can read"
        return ServerError(f"The key file {self.key_file} {problem}.", KEY_FILE_HINT)

    def _load(self) -> bool:
        try:
            keys = read_keys(self.key_file.read_text())
        except (OSError, ValueError):
            return False
        now = time.time()
        for kind in ("inference", "management"):
            expires = _parse_time(keys[kind].get("expiration time") or NEVER)
            if keys[kind]["key"] != self._keys.get(kind, {}).get("key"):
                self._lifetime[kind] = expires - now
            self._expires[kind] = expires
        self._keys = keys
        return True


def read_keys(text: str) -> dict:
    """The keys in a key file: TorchServe's key_file.json, one holding only ``{"inference": {"key": ...}}`` (the
    management key is then the same), or the key alone as plain text (the key of every kind). ValueError: none."""
    text = text.strip()
    if not text.startswith("{"):
        if not text or len(text.split()) != 1:
            raise ValueError("not a key")
        return {kind: {"key": text} for kind in ("inference", "management")}
    keys = json.loads(text)
    inference = keys.get("inference") if isinstance(keys, dict) else None
    if not isinstance(inference, dict) or not isinstance(inference.get("key"), str):
        raise ValueError("no inference key")
    management = keys.get("management") if isinstance(keys.get("management"), dict) else inference
    return {**keys, "inference": inference, "management": management}


def write_key_file(path: Path) -> Path:
    """A new key_file.json in TorchServe's format (inference, management and API keys that never expire),
    readable by this user only: how an engine other than TorchServe keeps its keys, read back by ``Keys``."""
    keys = {kind: {"key": secrets.token_urlsafe(24), "expiration time": NEVER} for kind in ("management", "inference")}
    keys["API"] = {"key": secrets.token_urlsafe(24)}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(keys, out)
    return Path(path)


def _parse_time(text: str) -> float:
    # "2026-11-22T07:26:35.796110540Z": Java writes nanoseconds, Python parses at most microseconds.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


class AuthorisedSession:
    """A requests session that authorises each call and turns connection failures into ServerError."""

    def __init__(self, keys: Keys, pool_size: int = 32):
        self.keys = keys
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size)
        self.session.mount("http://", adapter)

    def call(
        self, method: str, url: str, kind: str, *, timeout: float | None = 60.0, headers: dict | None = None, **kwargs
    ) -> requests.Response:
        resp = self._send(method, url, kind, timeout, headers, kwargs)
        if resp.status_code == 400 and "InvalidKeyException" in resp.text and self.keys.enabled:
            self.keys.renew(kind, resp.request.headers)  # the key expired between our check and the call
            resp = self._send(method, url, kind, timeout, headers, kwargs)
        return resp

    def _send(
        self, method: str, url: str, kind: str, timeout: float | None, headers: dict | None, kwargs: dict
    ) -> requests.Response:
        headers = {**(headers or {}), **self.keys.header(kind)}
        try:
            return self.session.request(method, url, headers=headers, timeout=timeout, **kwargs)
        except requests.Timeout:
            raise ServerError(
                f"TorchServe did not answer {method} {url} within {timeout} s.",
                "pass a larger timeout=, or check the worker log (server.log_tail()).",
            ) from None
        except requests.ConnectionError as err:
            raise ServerError(
                f"Cannot reach TorchServe at {url}: {err.__class__.__name__}.",
                "is the server running? Start it with server.start().",
            ) from None

    def close(self) -> None:
        self.session.close()
