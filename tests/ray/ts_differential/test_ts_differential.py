"""A TorchServe team's calls — every endpoint of the management, inference and metrics APIs, every parameter
TorchServe 0.12 reads with valid and odd values, and the sequences their scripts run — sent to a plain TorchServe and
to `msnb serve --engine ray --ts-config` over the same archives, one test per call: each answer the same as a script
reads it (status, error type and message, body), a difference not closed yet an expected failure with its reason,
and what msnb refuses on purpose checked as msnb's refusal with its Hint."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from differential_known import DIFFERS, LOOSE
from differential_runner import archives, ready, run_all, start_ours, start_plain
from differential_sequences import all_calls
from helpers import RAY_GROUP, RECORDED, poll, reach_recorded

pytestmark = pytest.mark.xdist_group(RAY_GROUP)  # (tests/ray/conftest.py groups only the files directly in tests/ray)
CALLS = all_calls()


def _param(call):
    why = DIFFERS.get(call.id)
    return pytest.param(
        call,
        id=call.id,
        marks=[pytest.mark.xfail(reason=why, strict=call.id not in LOOSE, raises=AssertionError)] if why else [],
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every call sent to both servers, in order, once: ``answers`` (id -> TorchServe's answer, msnb's), and what
    `msnb serve` wrote to its state file and printed."""
    root = tmp_path_factory.mktemp("differential")
    store = archives(root)
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two start side by side; each stops below once started
        starting = [pool.submit(start_plain, store, root), pool.submit(start_ours, store, root)]
    try:
        (_, truth), (ours, ray) = (future.result() for future in starting)
        poll(lambda: ready(truth, "named") and ready(ray, "named"), 240, "named's workers to be READY", interval=0.5)
        answers = run_all(CALLS, truth, ray, root / "outside")
        yield SimpleNamespace(answers=answers, state=ours.state, printed=ours.out.read_text())
    finally:
        for future in reversed(starting):
            if future.exception() is None:
                future.result()[0].stop()


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


# Every door `msnb serve --engine ray` opens, as (state file field, method, path under it, body).
DOORS = [
    ("inference_url", "POST", "/predictions/named", {"x": [1.0, 2.0, 3.0]}),
    ("management_url", "GET", "/models", None),
    ("metrics_url", "GET", "/metrics", None),
    ("openai_url", "GET", "/models", None),
    ("mcp_url", "POST", "", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
]


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("field,method,path,body", DOORS, ids=[d[0] for d in DOORS])
def test_every_door_refuses_a_foreign_host_or_origin_with_403_and_a_hint_and_answers_loopback_names(
    served, field, method, path, body
):
    url, port = served.state[field] + path, served.state[field].split(":")[2].split("/")[0]
    keys = json.loads(Path(served.state["key_file"]).read_text())
    kind = "management" if field == "management_url" else "inference"
    headers = {"Authorization": f"Bearer {keys[kind]['key']}", "Accept": "application/json, text/event-stream"}
    for foreign in ({"Host": "evil.example.com"}, {"Origin": "http://evil.example.com"}):
        resp = requests.request(method, url, json=body, headers={**headers, **foreign}, timeout=60)
        assert resp.status_code == 403 and "Hint:" in resp.text and "not allowed" in resp.text, (foreign, resp.text)
    for host in ("localhost", "127.0.0.1", "[::1]"):
        named = {"Host": f"{host}:{port}", "Origin": f"http://{host}:3000"}
        resp = requests.request(method, url, json=body, headers={**headers, **named}, timeout=60)
        assert resp.status_code == 200, (host, resp.text)
