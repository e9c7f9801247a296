"""A TorchServe team's calls — every endpoint of the management, inference and metrics APIs, every parameter
TorchServe 0.12 reads with valid and odd values, and the sequences their scripts run — sent to a plain TorchServe and
to `msnb serve --engine ray --ts-config` over the same archives, one test per call: each answer the same as a script
reads it (status, error type and message, body), a difference not closed yet an expected failure with its reason,
and what msnb refuses on purpose checked as msnb's refusal with its Hint."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from differential_known import DIFFERS
from differential_runner import archives, properties, ready, run_all, start_ours, start_plain
from differential_sequences import all_calls
from helpers import RAY_GROUP, RECORDED, poll, reach_recorded

pytestmark = pytest.mark.xdist_group(RAY_GROUP)  # (tests/ray/conftest.py groups only the files directly in tests/ray)
CALLS = all_calls()


def _param(call):
    why = DIFFERS.get(call.id)
    return pytest.param(call, id=call.id, marks=[pytest.mark.xfail(reason=why, strict=True)] if why else [])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every call sent to both servers, in order, once: ``answers`` (id -> TorchServe's answer, msnb's), and what
    `msnb serve` wrote to its state file and printed."""
    root = tmp_path_factory.mktemp("differential")
    store = archives(root)
    plain, truth = start_plain(store, properties(store), root)
    ours = None
    try:
        ours, ray = start_ours(properties(store), root)  # the same file on ports of its own
        poll(lambda: ready(truth, "named") and ready(ray, "named"), 240, "named's workers to be READY", interval=0.5)
        answers = run_all(CALLS, truth, ray, root / "outside")
        yield SimpleNamespace(answers=answers, state=ours.state, printed=ours.out.read_text())
    finally:
        if ours is not None:
            ours.stop()
        plain.stop()


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("call", [_param(c) for c in CALLS])
def test_a_call_is_answered_on_ray_as_plain_torchserve_answers_it(served, call):
    truth, ours = served.answers[call.id]
    if call.deliberate:  # msnb's own answer (docs/ray-management.md), a refusal with its Hint
        assert ours[0] == call.ours and (call.ours < 400 or ours[2] is True), (ours, truth)
        return
    assert ours == truth


@pytest.mark.timeout(2400)
def test_the_state_file_holds_every_address_msnb_serve_prints_and_each_answers(served):
    assert reach_recorded(served.state) == dict.fromkeys(RECORDED, 200), served.state
    assert all(served.state[field] in served.printed for field in RECORDED), (served.state, served.printed)
