"""A redeploy under load, as a notebook user does it: clients keep predicting while the cell is edited and served."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest
from helpers import mlp_class
from IPython.utils.capture import capture_output

import msnb.session
from msnb.errors import MsnbError

pytestmark = pytest.mark.server

CLIENTS = 8
REDEPLOYS = 3
BODY = textwrap.dedent(
    """
    import torch

    def init_function(hidden=8):
        torch.manual_seed(0)
        return LoadNet(hidden)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {{"label": int(output.argmax()), "served_by": {version}}}
    """
)


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "msnb")
    assert shell.run_cell("import torch\n" + mlp_class("LoadNet"), store_history=True).success
    return shell


@pytest.fixture
def session(monkeypatch):
    fresh = msnb.session.Session()
    monkeypatch.setattr(msnb.session, "_default", fresh)
    yield fresh
    fresh.stop()


def serve_version(shell, version: int):
    """Edit the handler cell (its answer names the version), run it, then `%ms_serve` it."""
    with capture_output():
        cell = shell.run_cell(
            f"%%ms_handler loadnet --batch-size 8 --max-batch-delay 20\n{BODY.format(version=version)}",
            store_history=True,
        )
        assert cell.success
        return shell.run_line_magic("ms_serve", "loadnet")


class Clients:
    """N threads predicting in a loop through one server object; every answer logged with its send time."""

    def __init__(self, server, n: int):
        self.server, self.stopping = server, threading.Event()
        self.log: list[tuple[float, object]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]

    def _loop(self) -> None:
        while not self.stopping.is_set():
            sent = time.monotonic()
            try:
                answer = self.server.predict("loadnet", {"x": [1, 2, 3, 4]}, timeout=30)
            except MsnbError as err:
                answer = err
            with self.lock:
                self.log.append((sent, answer))

    def __enter__(self) -> "Clients":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)


@pytest.mark.timeout(300)
def test_redeploys_under_load_lose_no_request_and_serve_no_stale_answer(ip, session):
    server = serve_version(ip, 0)
    returned: list[tuple[int, float]] = []
    with Clients(server, CLIENTS) as clients:
        for version in range(1, REDEPLOYS + 1):
            assert serve_version(ip, version) is server
            returned.append((version, time.monotonic()))
        # the clients keep going until each has an answer sent after the last redeploy returned
        last = returned[-1][1]
        while sum(sent > last for sent, _ in list(clients.log)) < 2 * CLIENTS:
            assert all(t.is_alive() for t in clients.threads), "a client thread died"
            time.sleep(0.05)
    failed = [answer for _, answer in clients.log if isinstance(answer, Exception)]
    assert not failed, f"{len(failed)} of {len(clients.log)} requests failed during redeploys: {failed[:3]}"
    for version, at in returned:
        stale = [answer for sent, answer in clients.log if sent > at and answer["served_by"] < version]
        assert not stale, f"{len(stale)} answers by an old version after redeploy {version} returned"
    assert {answer["served_by"] for _, answer in clients.log} == set(range(REDEPLOYS + 1))
    assert len([m for m in server.models() if m.name == "loadnet"]) == 1, "the old versions are unregistered"
