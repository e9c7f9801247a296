"""A key a handler reads from its environment reaches its model's workers only (``%ms_serve NAME --env VAR``), and is
in no file of the model folder, the archive, the model store or the logs."""

from __future__ import annotations

import hashlib
import stat

from helpers import ENV_HANDLER, ENV_KEY, ENV_VAR, files_holding

from msnb.engines.torchserve import LocalServer
from msnb.session.core import Session
from msnb.spec import spec_from_source


def test_env_reaches_that_models_workers_only_and_no_file_holds_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, ENV_KEY)  # the kernel's environment (the server starts after: it is not inherited)
    server = LocalServer(tmp_path / "server")
    session = Session(lambda engine, port: server)
    for name in ("keyed", "plain"):
        session.add(spec_from_source(name, ENV_HANDLER))
    try:
        session.serve("keyed", env=[ENV_VAR])
        session.serve("plain")
        truth = hashlib.sha256(ENV_KEY.encode()).hexdigest()  # what the handler computes from the key it reads
        assert server.predict("keyed", {}) == {"key_sha256": truth}
        assert server.predict("plain", {}) == {"key_sha256": None}  # another model never sees it
        held = server.layout.env_dir / "keyed.json"
        assert stat.S_IMODE(held.stat().st_mode) == 0o600 and stat.S_IMODE(held.parent.stat().st_mode) == 0o700
        built = session.build("keyed", tmp_path / "export")
        assert built.is_file()
        assert files_holding(server.workdir, ENV_KEY, skip=server.layout.env_dir) == []  # store, folders, logs
        assert files_holding(tmp_path / "export", ENV_KEY) == []  # the .mar
        assert not server.layout.env_dir.is_relative_to(server.model_store)
    finally:
        session.stop()
    assert not server.layout.env_dir.exists()  # gone with the server
    assert files_holding(tmp_path, ENV_KEY) == []
