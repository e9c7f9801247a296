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
    """A server of the test's own (the shared ones stay as they are): for a module of one such test, or a test that
    stops or configures the server itself."""
    srv = LocalServer(tmp_path / "own-server")
    with srv:
        yield srv
    assert not processes_naming(srv.workdir)


@pytest.fixture(scope="module")
def module_server(tmp_path_factory):
    """One server for a module's tests that register, redeploy, scale or unregister models of their own (a TorchServe
    start is seconds of Java and Python: one a module instead of one a test); ``clean_server`` hands it out."""
    srv = LocalServer(tmp_path_factory.mktemp("module-server"))
    with srv:
        yield srv
    assert not processes_naming(srv.workdir)


@pytest.fixture
def clean_server(module_server):
    """The module's server with no model registered, and none left after the test: each test passes alone and in
    any order. A test that stops or configures the server itself uses ``own_server``."""
    assert not module_server.models(), "a test before this one left models on the module's server"
    yield module_server
    for name in sorted({status.name for status in module_server.models()}):
        module_server.unregister(name)  # every version, and its files in the store
