"""The Ray router's doors without a cluster: where its inference key comes from (TorchServe's checks themselves:
tests/unit/templates/test_ts_checks.py)."""

from __future__ import annotations

import pytest

from msnb.engines.auth import Keys, write_key_file
from msnb.templates.msnb_runtime.ray import token_interceptor as guard


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
