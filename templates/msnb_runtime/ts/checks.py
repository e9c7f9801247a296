"""The checks TorchServe's frontend makes before a request reaches a worker, kept by every engine's front: the
inference key (TorchServe's key_file.json, its 400 InvalidKeyException) and the body size limit (max_request_size,
its 413).

Depends on the standard library only, never on msnb.
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

# TorchServe's answer to a missing or wrong key (its frontend's InvalidKeyException), word for word.
INVALID_KEY = (
    400,
    "InvalidKeyException",
    "Token Authorization failed. Token either incorrect, expired, or not provided correctly",
)


def read_key(path: Path) -> str:
    """The key in ``path``: TorchServe's key_file.json (its inference key) or a file that holds only the key."""
    text = path.read_text().strip()
    if text.startswith("{"):
        return json.loads(text)["inference"]["key"]
    return text


def carries_key(authorization: str, key: str) -> bool:
    """Whether an Authorization header's value is ``Bearer KEY`` (compared in constant time)."""
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


def refused(headers: dict, key: str | None) -> tuple[int, str, str] | None:
    """TorchServe's 400 InvalidKeyException when ``key`` is set and the request (its lowercased ``headers``) does not
    carry it; else None."""
    if key is None or carries_key(headers.get("authorization", ""), key):
        return None
    return INVALID_KEY


def too_large(size: int, limit: int | None) -> tuple[int, str, str] | None:
    """413 for a body over ``limit`` bytes (TorchServe's max_request_size); None when it fits or no limit."""
    if limit is None or size <= limit:
        return None
    return 413, "RequestEntityTooLarge", f"The request body ({size} bytes) is over max_request_size ({limit} bytes)"
