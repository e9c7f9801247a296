"""TorchServe's checks and wire format as the engines that are not TorchServe keep them (templates/msnb_runtime/ts/checks.py,
msnb_runtime/ts/wire.py): its answer to a missing or wrong key, the body size limit, and a body too deep to decode forwarded
as TorchServe forwards it."""

from __future__ import annotations

import json

from msnb.templates.msnb_runtime.ts import checks
from msnb.templates.msnb_runtime.ts.wire import decode_body, error_reply

# TorchServe 0.12's own answer, word for word.
KEY_ERROR = {
    "code": 400,
    "type": "InvalidKeyException",
    "message": "Token Authorization failed. Token either incorrect, expired, or not provided correctly",
}


def test_a_missing_or_wrong_key_gets_torchserves_400():
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic secret"}):
        status, _, body = error_reply(*checks.refused(headers, "secret"))
        assert status == 400 and json.loads(body) == KEY_ERROR
    assert checks.refused({"authorization": "Bearer secret"}, "secret") is None
    assert checks.refused({}, None) is None  # auth: false


def test_the_key_is_a_bearer_token_compared_whole():
    assert checks.carries_key("Bearer secret", "secret") and checks.carries_key("bearer secret ", "secret")
    for sent in ("", "Bearer", "Bearer secre", "Bearer secret2", "Basic secret", "secret"):
        assert not checks.carries_key(sent, "secret"), sent


def test_a_body_over_the_limit_is_413_naming_the_limit():
    assert checks.too_large(100, 100) is None and checks.too_large(10**9, None) is None
    status, kind, message = checks.too_large(101, 100)
    assert status == 413 and "max_request_size (100 bytes)" in message


def test_a_body_too_deeply_nested_to_decode_is_forwarded_as_bytes_like_torchserve():
    deep = b"[" * 100_000 + b"]" * 100_000
    assert decode_body(deep, "application/json") == deep
