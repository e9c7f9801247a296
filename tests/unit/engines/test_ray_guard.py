"""The Ray router's doors without a cluster: where its inference key comes from, TorchServe's answer to a missing
or wrong key, the body size limit, and a body too deep to decode forwarded as TorchServe forwards it."""

from __future__ import annotations

import json

import pytest

from msnb.engines.auth import Keys, write_key_file
from msnb.templates import msnb_ray_guard as guard

KEY_ERROR = {"code": 400, "type": "InvalidKeyException",
             "message": "Token Authorization failed. Token either incorrect, expired, or not provided correctly"}  # fmt: skip


@pytest.fixture
def no_key_env(monkeypatch):
    monkeypatch.delenv(guard.KEY_VAR, raising=False)
    monkeypatch.delenv(guard.KEY_FILE_VAR, raising=False)


def test_the_key_comes_from_a_key_file_in_torchserves_format_readable_by_the_user_alone(tmp_path, no_key_env):
    path = write_key_file(tmp_path / "key_file.json")
    assert path.stat().st_mode & 0o777 == 0o600
    key = guard.inference_key({"key_file": str(path)})
    # the client side reads the same file the same way it reads TorchServe's
    assert Keys(path, None).header("inference") == {"Authorization": f"Bearer {key}"}


def test_the_key_comes_from_the_environment_or_a_mounted_file(tmp_path, monkeypatch, no_key_env):
    monkeypatch.setenv(guard.KEY_VAR, "from-env")
    assert guard.inference_key({}) == "from-env"
    (tmp_path / "secret").write_text("from-file\n")
    monkeypatch.setenv(guard.KEY_FILE_VAR, str(tmp_path / "secret"))
    assert guard.inference_key({}) == "from-file"


def test_no_key_is_an_error_naming_where_to_put_one_unless_auth_is_off_explicitly(no_key_env):
    with pytest.raises(guard.KeyMissingError, match=guard.KEY_VAR):
        guard.inference_key({})
    assert guard.inference_key({"auth": False}) is None and guard.inference_key({"auth": "false"}) is None


def test_a_missing_or_wrong_key_gets_torchserves_400(tmp_path):
    from msnb.templates import msnb_ray

    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic secret"}):
        status, _, body = msnb_ray.error_reply(*guard.refused(headers, "secret"))
        assert status == 400 and json.loads(body) == KEY_ERROR
    assert guard.refused({"authorization": "Bearer secret"}, "secret") is None
    assert guard.refused({}, None) is None  # auth: false


def test_a_body_over_the_limit_is_413_naming_the_limit():
    assert guard.too_large(100, 100) is None and guard.too_large(10**9, None) is None
    status, kind, message = guard.too_large(101, 100)
    assert status == 413 and "max_request_size (100 bytes)" in message


def test_a_body_too_deeply_nested_to_decode_is_forwarded_as_bytes_like_torchserve():
    from msnb.templates.msnb_ray_http import decode_body

    deep = b"[" * 100_000 + b"]" * 100_000
    assert decode_body(deep, "application/json") == deep
