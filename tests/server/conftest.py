"""Fixtures for the real-TorchServe tier: tiny handlers packed by the real torch-model-archiver CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import BROKEN_INIT, ECHO, IMPORT_ERROR, build_mar, processes_naming

from msnb.engines.torchserve import LocalServer


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mars")
    return {
        "echo": build_mar(root / "echo", "echo", ECHO),
        "broken": build_mar(root / "broken", "broken", BROKEN_INIT),
        "importerror": build_mar(root / "importerror", "importerror", IMPORT_ERROR),
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory, archives):
    """One running server per test module, with the echo model registered (response_timeout 3 s).

    Shared by the module's tests: a test that registers, scales or stops anything uses its own server.
    """
    srv = LocalServer(tmp_path_factory.mktemp("server"))
    with srv:
        srv.register(archives["echo"], response_timeout=3)
        yield srv
    assert not processes_naming(srv.workdir)


@pytest.fixture
def own_server(tmp_path):
    """A server of the test's own, for tests that register, scale or unregister (the shared one stays as it is)."""
    srv = LocalServer(tmp_path / "own-server")
    with srv:
        yield srv
    assert not processes_naming(srv.workdir)
