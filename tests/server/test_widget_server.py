"""The build widget over a real Session and a real TorchServe: the server dies behind its back."""

from __future__ import annotations

import shutil
import tempfile

import ipywidgets as widgets
import pytest

from msnb.engines.torchserve import LocalServer
from msnb.session.core import Session
from msnb.ui.widget import BuildWidget
from msnb.ui.widget.controller import Actions
from msnb.ui.widget.devices import Device, Inventory

CPU_ONLY = Inventory((Device("auto", "auto"), Device("cpu", "CPU")), "No GPU found by NVML: the model runs on CPU.")


@pytest.fixture(autouse=True)
def _close_widgets():
    yield
    widgets.Widget.close_all()


def click(w: BuildWidget, action: str, timeout: float = 10) -> None:
    w.buttons[action].click()
    assert w.wait(timeout), f"{action} still running after {timeout} s"


def disabled(w: BuildWidget) -> dict[str, bool]:
    return {name: b.disabled for name, b in w.buttons.items()}


def test_real_server_killed_after_serve_then_serve_again(mlp_spec):
    # TorchServe's worker sockets live in the server's workdir: keep it short (AF_UNIX paths max 107 bytes).
    workdir = tempfile.mkdtemp(prefix="msnb-w-")
    session = Session(lambda engine, port: LocalServer(workdir))
    session.add(mlp_spec)
    w = BuildWidget("mlp", actions=Actions.from_session(session), devices=CPU_ONLY)
    try:
        click(w, "serve", 180)
        assert not disabled(w)["predict"], w.result.value
        java = session.server(create=False)._java
        java.kill()  # the Java server dies behind the widget's back
        java.wait(30)
        click(w, "predict", 60)
        assert "no longer running" in w.result.value and disabled(w)["predict"]
        click(w, "serve", 180)
        click(w, "predict", 60)
        assert "&quot;label&quot;" in w.result.value, w.result.value
    finally:
        session.stop()
        shutil.rmtree(workdir, ignore_errors=True)
