"""The two servers `msnb shadow` stands before: each one's addresses and inference key (re-read when its key file
changes, as TorchServe rewrites key_file.json when a key is renewed), checked at start: it answers /ping with its key."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests

from msnb.engines.auth import KEY_FILE_HINT, read_keys
from msnb.errors import OptionError, ServerError

PRIMARY, CANDIDATE = "primary", "candidate"
PROBE_TIMEOUT_S = 10.0
LOOK_S = 1.0  # how often a key file is looked at again (a renewed key is used within that)
START_HINTS = {
    PRIMARY: "start your TorchServe first (torchserve --start ...), and give its inference address, e.g. "
    "--primary http://127.0.0.1:8080",
    CANDIDATE: "start the candidate first (e.g. msnb serve STORE --engine ray), or give a STORE instead of "
    "--candidate and msnb shadow starts it on a local Ray",
}


class KeyFile:
    """A key file (TorchServe's key_file.json, or a file holding the key alone): its inference key, read again when
    the file changes."""

    def __init__(self, path: Path):
        self.path, self._stamp, self._key, self._looked = Path(path), None, "", 0.0

    def key(self) -> str:
        """The inference key (the file looked at again at most every ``LOOK_S``); an OptionError when it holds none."""
        now = time.monotonic()
        if self._key and now - self._looked < LOOK_S:
            return self._key
        self._looked = now
        try:
            found = os.stat(self.path)
            stamp = (found.st_mtime_ns, found.st_size)
            if stamp != self._stamp:
                self._key, self._stamp = read_keys(self.path.read_text())["inference"]["key"], stamp
        except (OSError, ValueError, KeyError):
            if not self._key:
                raise OptionError(f"The key file {self.path} cannot be read or holds no key.", KEY_FILE_HINT) from None
        return self._key

    def header(self) -> bytes:
        return b"Bearer " + self.key().encode("latin-1")


@dataclass(frozen=True)
class Side:
    """One of the two servers: its ``role``, its inference address (``url``), the address of its /v1 and /mcp
    (``api``: the same unless told) and its key file (None: it asks for no key)."""

    role: str
    url: str
    api: str
    key: KeyFile | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": self.key.header().decode("latin-1")} if self.key else {}


def side(role: str, url: str, key_file: Path | None, api: str | None = None, flag: str = "") -> Side:
    """A side from the command line's address (``flag`` names it in an error), API address and key file."""
    if key_file is not None and not Path(key_file).is_file():
        raise OptionError(f"--{role}-token-file {key_file}: no such file.", KEY_FILE_HINT)
    keys = KeyFile(Path(key_file).resolve()) if key_file is not None else None
    if keys is not None:
        keys.key()
    base = address(url, flag or f"--{role}")
    return Side(role, base, address(api, f"--{role}-api") if api else base, keys)


def address(url: str, flag: str) -> str:
    """``http://host:port`` from a URL given on the command line; an OptionError for anything else."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/") or parts.query:
        raise OptionError(
            f"{flag} {url!r} is not a server's address.",
            "give it as http://HOST:PORT (TorchServe's "
            "inference address, e.g. http://127.0.0.1:8080; https is not spoken here).",
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"http://{host}:{port}"


def probe(one: Side) -> None:
    """Check that ``one`` answers /ping with its key: a ServerError when it does not answer or is not healthy, an
    OptionError when it asks for a key it was not given or refuses the one it was given."""
    flag = f"--{one.role}-token-file"
    try:
        resp = requests.get(f"{one.url}/ping", headers=one.headers(), timeout=PROBE_TIMEOUT_S)
    except requests.RequestException as err:
        raise ServerError(
            f"The {one.role} at {one.url} does not answer ({type(err).__name__}).", START_HINTS[one.role] + "."
        ) from None
    if resp.status_code in (400, 401) and "InvalidKeyException" in resp.text and one.key is None:
        raise OptionError(
            f"The {one.role} at {one.url} asks for an inference key, and none was given.",
            f"give {flag} KEY_FILE: {KEY_FILE_HINT.partition(': ')[2]}.",
        )
    if resp.status_code in (400, 401) and "InvalidKeyException" in resp.text:
        raise OptionError(
            f"The {one.role} at {one.url} refuses the key in {one.key.path}.",
            f"give {flag} the key file of that server (it may have been restarted with a new key).",
        )
    if resp.status_code != 200:
        raise ServerError(
            f"The {one.role} at {one.url} is not healthy: /ping answered {resp.status_code} {resp.text[:200]!r}.",
            "wait until its models are loaded, or read its logs; then start msnb shadow again.",
        )


def distinct(primary: Side, candidate: Side) -> None:
    """The candidate is not the primary itself (every answer would agree, and the primary would serve twice)."""
    if primary.url == candidate.url:
        raise OptionError(
            f"The candidate {candidate.url} is the primary itself.",
            "give --candidate the address of the other server (or a STORE to serve on a local Ray).",
        )
