"""Serving from a notebook when things happen: a redeploy under load, and Ctrl-C (the stop button) mid-step."""

from __future__ import annotations

import signal
import textwrap
import threading
import time

import pytest
from helpers import mlp_class, poll
from IPython.utils.capture import capture_output

from bench.harness import ClientLoad
from msnb.engines.store import safe_name
from msnb.engines.torchserve.logs import LogCursor

pytestmark = pytest.mark.server

CLIENTS = 8
REDEPLOYS = 3
BODY = textwrap.dedent(
    """
    import time
    import torch

    def init_function(hidden=8):
        torch.manual_seed(0)
        return LoadNet(hidden)

    def preprocess(sample):
        time.sleep(sample.get("sleep", 0))
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {{"label": int(output.argmax()), "served_by": {version}}}
    """
)


@pytest.fixture(scope="module")
def ip(ip):
    """The kernel tier's shell, with the LoadNet cell executed."""
    assert ip.run_cell("import torch\n" + mlp_class("LoadNet"), store_history=True).success
    return ip


def serve_version(shell, version: int, shown: list | None = None, batch_size: int = 8):
    """Edit the handler cell (its answer names the version), run it, then `%ms_serve` it (a code-only edit
    reloads in the live worker; another ``batch_size`` makes it a new version)."""
    with capture_output():
        cell = shell.run_cell(
            f"%%ms_handler loadnet --batch-size {batch_size} --max-batch-delay 20\n{BODY.format(version=version)}",
            store_history=True,
        )
    assert cell.success
    with capture_output() as cap:
        result = shell.run_cell("%ms_serve loadnet")  # as a user's cell: a failure fails it
    if shown is not None:
        shown.append("\n".join([cap.stdout, cap.stderr, *(str(o.data) for o in cap.outputs)]))
    return result.result if result.success else None


def press_stop_when(condition) -> threading.Thread:
    """Jupyter's stop button: SIGINT to the main thread once ``condition()`` holds (bounded)."""
    main = threading.main_thread().ident

    def watch() -> None:
        if poll(condition, 60):
            signal.pthread_kill(main, signal.SIGINT)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(300)
def test_redeploys_under_load_lose_no_request_and_serve_no_stale_answer(ip, session):
    server = serve_version(ip, 0)
    returned: list[tuple[int, float]] = []
    ask = lambda: server.predict("loadnet", {"x": [1, 2, 3, 4]}, timeout=30)  # noqa: E731
    with ClientLoad(ask, CLIENTS) as clients:
        for version in range(1, REDEPLOYS + 1):
            assert serve_version(ip, version) is server
            returned.append((version, time.monotonic()))
        # the clients keep going until each has an answer sent after the last redeploy returned
        last = returned[-1][1]
        while sum(sent > last for sent, _, _ in list(clients.log)) < 2 * CLIENTS:
            assert all(t.is_alive() for t in clients.threads), "a client thread died"
            time.sleep(0.05)
    failed = [answer for _, _, answer in clients.log if isinstance(answer, Exception)]
    assert not failed, f"{len(failed)} of {len(clients.log)} requests failed during redeploys: {failed[:3]}"
    for version, at in returned:
        stale = [answer for sent, _, answer in clients.log if sent > at and answer["served_by"] < version]
        assert not stale, f"{len(stale)} answers by an old version after redeploy {version} returned"
    assert {answer["served_by"] for _, _, answer in clients.log} == set(range(REDEPLOYS + 1))
    assert len([m for m in server.models() if m.name == "loadnet"]) == 1, "the old versions are unregistered"


# ------------------------------------------------------------------ Ctrl-C
@pytest.mark.timeout(240)
def test_the_stop_button_during_a_redeploy_says_what_was_interrupted_and_what_is_still_served(ip, session):
    server = serve_version(ip, 0)
    shown: list[str] = []
    press_stop_when(lambda: (server.model_store / safe_name("loadnet", "1.0-r2")).exists())
    assert serve_version(ip, 1, shown, batch_size=4) is None  # a new version (a reload is over in ~0.2 s)
    text = shown[0]
    assert "Interrupted while deploying loadnet: the server still runs; it serves loadnet 1.0 (default)" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and len(text.splitlines()) < 10
    assert server.predict("loadnet", {"x": [1, 2, 3, 4]})["served_by"] == 0
    assert serve_version(ip, 1) is server  # running it again deploys the edit
    assert server.predict("loadnet", {"x": [1, 2, 3, 4]})["served_by"] == 1


@pytest.mark.timeout(240)
def test_the_stop_button_while_waiting_for_an_answer_is_one_message_and_the_server_stays(ip, session):
    server = serve_version(ip, 0)
    cursor = LogCursor(server.log_dir)
    press_stop_when(lambda: "Backend received inference" in cursor.new_text(0))
    with capture_output() as cap:
        result = ip.run_cell("""%ms_predict loadnet --data '{"x": [1, 2, 3, 4], "sleep": 3}'""")
    text = "\n".join([cap.stdout, cap.stderr, *(str(o.data) for o in cap.outputs)])
    assert not result.success and "Interrupted while waiting for loadnet's answer: the server keeps running" in text
    assert "Traceback" not in text
    assert server.running and server.predict("loadnet", {"x": [1, 2, 3, 4]})["served_by"] == 0
