"""Fixtures of the kernel tier: IPython's test shell with msnb loaded, and a fresh msnb session per test."""

from __future__ import annotations

import pytest

import msnb.session.core


@pytest.fixture(scope="module")
def ip():
    """IPython's test shell (one per process) with `%load_ext msnb` done; a module may extend it with cells."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "msnb")
    return shell


@pytest.fixture
def session(monkeypatch):
    """A fresh msnb session for the test (specs, archives, server), stopped afterwards."""
    fresh = msnb.session.core.Session()
    monkeypatch.setattr(msnb.session.core, "_default", fresh)
    yield fresh
    fresh.stop()
