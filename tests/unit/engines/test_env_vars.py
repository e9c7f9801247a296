"""``--env``: which variables a model is given, which a server never inherits, and the file its workers read."""

from __future__ import annotations

import json
import os
import stat

import pytest

from msnb.engines import env_vars
from msnb.errors import OptionError
from msnb.templates.msnb_runtime.handler.env import load_env


def test_a_variable_missing_from_the_environment_is_refused_with_a_hint():
    with pytest.raises(OptionError) as caught:
        env_vars.resolve(["OPENAI_API_KEY", "HOME"], "m", {"HOME": "/root"})
    text = caught.value.render()
    assert "--env OPENAI_API_KEY: it is not set in this process's environment, so 'm' cannot be given it" in text
    assert "Hint: set it where the notebook runs (`%env OPENAI_API_KEY=...`" in text
    with pytest.raises(OptionError, match="not an environment variable's name"):
        env_vars.resolve(["OPENAI_API_KEY=sk-x"], "m", {})
    assert env_vars.resolve(["A", "A"], "m", {"A": "1"}) == {"A": "1"}


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "GH_APIKEY"])
def test_credential_looking_variables_never_reach_a_server_unnamed(name):
    assert env_vars.credential(name)
    assert name not in env_vars.without_credentials({name: "x", "PATH": "/bin"})


@pytest.mark.parametrize("name", ["PATH", "PWD", "TOKENIZERS_PARALLELISM", "KEYBOARD", "JAVA_HOME", "SSH_AUTH_SOCK"])
def test_other_variables_stay(name):
    assert not env_vars.credential(name)


def test_the_file_is_private_and_read_by_that_models_runtime_only(tmp_path, monkeypatch):
    folder = tmp_path / "model_env"
    env_vars.write(folder, "keyed", {"OPENAI_API_KEY": "value"})
    path = folder / "keyed.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("keyed", "plain"):  # two model folders, as TorchServe unpacks them
        (tmp_path / name / "MAR-INF").mkdir(parents=True)
        (tmp_path / name / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"model": {"modelName": name}}))
    monkeypatch.setenv(env_vars.ENV_DIR_VAR, str(folder))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert load_env(str(tmp_path / "plain" / "handler_model.py")) == []
    assert "OPENAI_API_KEY" not in os.environ
    assert load_env(str(tmp_path / "keyed" / "handler_model.py")) == ["OPENAI_API_KEY"]
    monkeypatch.delenv("OPENAI_API_KEY")
    env_vars.write(folder, "keyed", {})  # served again without --env: no file
    assert not path.exists()
    env_vars.remove(folder)
    assert not folder.exists()
