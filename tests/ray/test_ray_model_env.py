"""On Ray Serve, ``--env VAR`` reaches the replicas of that model (set by their constructor): they read the key, another
model's do not, and no file of the model folders or Ray's logs holds it."""

from __future__ import annotations

import hashlib

from helpers import ENV_HANDLER, ENV_KEY, ENV_VAR, files_holding

from msnb.spec import spec_from_source


def test_env_reaches_that_models_replicas_only_and_no_file_holds_the_key(ray_session, monkeypatch):
    monkeypatch.setenv(ENV_VAR, ENV_KEY)
    for name in ("rkeyed", "rplain"):
        ray_session.add(spec_from_source(name, ENV_HANDLER))
    server = ray_session.serve("rkeyed", engine="ray", env=[ENV_VAR])
    ray_session.serve("rplain", engine="ray")
    truth = hashlib.sha256(ENV_KEY.encode()).hexdigest()
    assert server.predict("rkeyed", {}) == {"key_sha256": truth}
    assert server.predict("rplain", {}) == {"key_sha256": None}
    assert files_holding(server.root, ENV_KEY) == []  # model folders, Ray's logs and session files
