"""A third engine is one folder and one registry entry: the stand-in engine (tests/standin/, model folders served by
worker processes of its own through TorchServe's loader and the shared handler) runs the session's scenario —
%ms_test, %ms_serve --engine standin, %ms_predict, a code-only edit reloaded in the live worker, %ms_stop — with no
other file of msnb changed; its answers are plain torch's on the same weights."""

from __future__ import annotations

import textwrap

import psutil
import pytest
import standin
import torch
from IPython.utils.capture import capture_output

from msnb.engines import registry

pytestmark = pytest.mark.kernel

HANDLER = textwrap.dedent(
    """
    import torch

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {"scores": [round(v, 5) for v in output.tolist()]}
    """
)
X = [0.5, -1.0, 2.0, 0.1]


@pytest.fixture
def third_engine():
    registry.register(standin.ENGINE)  # the one place the stand-in is known
    yield
    registry.unregister(standin.ENGINE.kind)


def notebook_answer(scale: float = 1.0) -> dict:
    """The notebook's own computation: the same seed, weights and input in plain torch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with torch.inference_mode():
        out = model(torch.tensor(X)) * scale
    return {"scores": [round(v, 5) for v in out.tolist()]}


def cell(ip, source: str):
    with capture_output() as cap:
        result = ip.run_cell(source, store_history=True)
    assert result.success, f"{result.error_in_exec or result.error_before_exec}\n{cap.stdout}\n{cap.stderr}"
    return result.result


def test_a_stand_in_engine_runs_the_sessions_scenario(ip, session, third_engine):
    cell(ip, f"%%ms_handler tiny --example '{{\"x\": {X}}}'\n{HANDLER}")
    assert cell(ip, "%ms_test tiny") == notebook_answer()
    server = cell(ip, "%ms_serve tiny --engine standin")
    assert server.kind == "standin" and session.engine == "standin"
    assert cell(ip, f"%ms_predict tiny --data '{{\"x\": {X}}}'") == notebook_answer()
    (worker,) = server._workers["tiny"].values()

    cell(
        ip,
        "%%ms_handler tiny --example '{\"x\": [1, 2, 3, 4]}'\n"
        + HANDLER.replace("output.tolist()", "(output * 2).tolist()"),
    )
    cell(ip, "%ms_serve tiny --engine standin")
    assert session.reloads.models["tiny"].redeploy == "reload"  # a code-only edit: the live worker swapped it
    assert server._workers["tiny"] == {"1.0": worker} and worker.process.poll() is None
    assert cell(ip, f"%ms_predict tiny --data '{{\"x\": {X}}}'") == notebook_answer(scale=2.0)

    pid = worker.process.pid
    cell(ip, "%ms_stop")
    assert not server.running and not psutil.pid_exists(pid)


def test_an_engine_not_in_the_registry_is_refused_with_the_ones_there_are(ip, session):
    with capture_output() as cap:
        result = ip.run_cell("%%ms_handler tiny2\n" + HANDLER, store_history=True)
        assert result.success
        result = ip.run_cell("%ms_serve tiny2 --engine standin")
    assert not result.success
    assert "Unknown engine 'standin'" in cap.stdout + cap.stderr and "torchserve, ray" in cap.stdout + cap.stderr
