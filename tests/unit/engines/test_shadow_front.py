"""The shadow front (msnb.engines.shadow.ingress), real sockets on its own event loop, before two stand-in servers
that answer as TorchServe's inference API does: a slow or absent candidate changes nothing a client gets, copies
that cannot go in time are dropped and counted, a split share answered by a candidate that is down falls back to the
primary, and the metrics address wants the front's key for everything but /metrics. The front before real
TorchServes is tested in tests/cli/test_shadow.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from helpers import poll, refused_port

from msnb.engines.shadow import mirror
from msnb.engines.shadow.ingress import Settings, Shadow
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY, KeyFile, Side


class Stand(BaseHTTPRequestHandler):
    """Answers ``{"side": NAME, "body": ...}`` after ``delay`` seconds; records the Authorization it got."""

    protocol_version = "HTTP/1.1"
    name, delay, seen = "", 0.0, []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(self.headers.get("Authorization"))
        time.sleep(self.delay)
        answer = json.dumps({"side": self.name, "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def stand(name: str, delay: float = 0.0) -> ThreadingHTTPServer:
    kind = type(f"Stand_{name}", (Stand,), {"name": name, "delay": delay, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), kind)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Running:
    """A Shadow front on an event loop in a thread of its own (``asyncio.run``: what is left is cancelled at stop)."""

    def __init__(self, sides: dict[str, Side], tmp_path: Path, **settings):
        (tmp_path / "key").write_text("front-key")
        self.shadow = Shadow(
            sides, Settings(tmp_path / "d.jsonl", **settings), KeyFile(tmp_path / "key"), "ctl", lambda line: None
        )
        self.started, self.loop, self.stopping = threading.Event(), None, None
        self.thread = threading.Thread(target=asyncio.run, args=(self.serve(),), daemon=True)
        self.thread.start()
        assert self.started.wait(30)

    async def serve(self) -> None:
        self.loop, self.stopping = asyncio.get_running_loop(), asyncio.Event()
        await self.shadow.start()
        self.started.set()
        await self.stopping.wait()
        await self.shadow.stop()

    def post(self, path: str = "/predictions/m", body: bytes = b"{}", key: str = "front-key") -> requests.Response:
        return requests.post(self.shadow.url + path, data=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def counts(self) -> dict:
        return self.shadow.tally.snapshot().get("m", {})

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(30)


def side(role: str, server: ThreadingHTTPServer | int, tmp_path: Path) -> Side:
    url = f"http://127.0.0.1:{server if isinstance(server, int) else server.server_port}"
    (tmp_path / f"{role}.key").write_text(f"{role}-key")
    return Side(role, url, url, KeyFile(tmp_path / f"{role}.key"))


@pytest.fixture
def down():
    """A candidate port no server answers (a server found there would be judged as the candidate)."""
    with refused_port() as port:
        yield port


@pytest.fixture
def primary():
    server = stand("primary")
    yield server
    server.shutdown()


def test_a_slow_candidate_changes_nothing_a_client_gets_and_copies_that_cannot_wait_are_dropped(
    primary, tmp_path, monkeypatch
):
    slow = stand("candidate", delay=1.0)
    monkeypatch.setattr(mirror, "WORKERS", 1)  # one copy in flight: the queue fills behind the slow side
    front = Running(
        {PRIMARY: side(PRIMARY, primary, tmp_path), CANDIDATE: side(CANDIDATE, slow, tmp_path)}, tmp_path, queue=2
    )
    try:
        started = time.monotonic()
        answers = [front.post(body=json.dumps(i).encode()) for i in range(8)]
        assert time.monotonic() - started < 4, "the answers waited for the candidate"
        assert [a.json() for a in answers] == [{"side": "primary", "body": str(i)} for i in range(8)]
        counts = poll(
            lambda: (c := front.counts())["equal"] + c["different"] + c["dropped"] == 8 and c,
            30,
            "every copy judged or dropped",
        )
        assert counts["dropped"] >= 4 and counts["answered"] == {"primary": 8, "candidate": 0}
        assert counts["different"] == 8 - counts["dropped"]  # the stand-ins name themselves: every pair differs
        assert primary.RequestHandlerClass.seen == ["Bearer primary-key"] * 8  # each side gets its own key
        assert set(slow.RequestHandlerClass.seen) == {"Bearer candidate-key"}
    finally:
        front.stop()
        slow.shutdown()


def test_a_split_share_the_candidate_cannot_answer_is_answered_by_the_primary(primary, down, tmp_path):
    front = Running(
        {PRIMARY: side(PRIMARY, primary, tmp_path), CANDIDATE: side(CANDIDATE, down, tmp_path)}, tmp_path, split=50
    )
    try:
        assert [front.post().json()["side"] for _ in range(6)] == ["primary"] * 6
        # counted once each answer has gone out, after the client may already have read it: polled, as the copies are
        counts = poll(
            lambda: (c := front.counts())["candidate_errors"] == 6 and c["answered"]["primary"] == 6 and c,
            30,
            "the candidate's errors and the primary's answers counted",
        )
        assert counts["answered"] == {"primary": 6, "candidate": 0} and counts["equal"] == 0
        assert front.post(key="wrong").status_code == 400  # the front's key, TorchServe's InvalidKeyException
    finally:
        front.stop()


def test_the_metrics_address_serves_prometheus_to_anyone_and_control_with_the_key_only(primary, down, tmp_path):
    front = Running({PRIMARY: side(PRIMARY, primary, tmp_path), CANDIDATE: side(CANDIDATE, down, tmp_path)}, tmp_path)
    metrics = front.shadow.metrics_url
    try:
        front.post()
        assert "msnb_shadow_requests_total" in requests.get(f"{metrics}/metrics", timeout=30).text
        assert requests.get(f"{metrics}/shadow/status", timeout=30).status_code == 400
        ctl = {"Authorization": "Bearer ctl"}
        split = requests.post(f"{metrics}/shadow/split", json={"percent": 20}, headers=ctl, timeout=30)
        assert split.status_code == 200 and split.json()["event"] == "split" and split.json()["was"] == 0
        bad = requests.post(f"{metrics}/shadow/split", json={"percent": "half"}, headers=ctl, timeout=30)
        assert bad.status_code == 400 and "Hint:" in bad.json()["message"]
        status = requests.get(f"{metrics}/shadow/status", headers=ctl, timeout=30).json()
        assert status["split"] == 20 and status["primary"] == front.shadow.sides[PRIMARY].url
        lines = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
        assert [line["kind"] for line in lines] == ["split"]
    finally:
        front.stop()
