"""The session's engine choice: TorchServe or Ray Serve, one at a time, and a clear error without the Ray extra."""

from __future__ import annotations

import sys

import pytest

from msnb.engines.ray import INSTALL_HINT
from msnb.errors import MsnbError
from msnb.session.core import Session


class FakeServer:
    running, pid = True, 4242

    def __init__(self):
        self.stopped = False

    def stop(self):
        self.stopped, self.running = True, False


def test_an_unknown_engine_names_the_known_ones():
    with pytest.raises(MsnbError, match="Unknown engine 'triton'") as info:
        Session().use_engine("triton")
    assert "torchserve, ray" in info.value.hint


def test_engine_ray_without_the_extra_names_it_and_stops_nothing(monkeypatch):
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the extra
    session = Session(lambda engine, port: FakeServer())
    server = session.server()
    with pytest.raises(MsnbError) as info:
        session.use_engine("ray")
    assert info.value.hint == INSTALL_HINT and 'pip install "msnb[ray]"' in INSTALL_HINT
    assert not server.stopped and session.engine == "torchserve"


def test_switching_engines_stops_the_other_one_first():
    pytest.importorskip("ray.serve")
    session = Session(lambda engine, port: FakeServer())
    server = session.server()
    session.use_engine("ray", port=8123)
    assert server.stopped and session.engine == "ray" and session.server(create=False) is None
    session.use_engine(None)  # None keeps the engine in use
    assert session.engine == "ray"
