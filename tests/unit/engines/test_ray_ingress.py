"""The Ray engine's front (msnb.engines.ray.ingress), the real process, before a stand-in for Serve's replicas: an HTTP
server that answers the router's target list and predictions as the replicas do (whole, or chunk by chunk). The
front on a real local Ray is tested in tests/ray (every prediction there goes through it)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from helpers import refused_port

from msnb.engines.ray import ingress
from msnb.engines.ray.ingress import Routes
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.ray.ingress import TARGETS_PATH

KEY = "front-test-key"
LIMIT = 1000
PIECES = [b"the", b" cat", b" sat"]


class Replica(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    routes: dict = {}
    seen: list = []

    def do_GET(self):
        assert self.path == TARGETS_PATH and self.headers["Authorization"] == f"Bearer {KEY}"
        self.answer(200, json.dumps(self.routes).encode(), "application/json")

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, self.headers.get("Authorization"), body))
        if self.path.startswith("/predictions/streamer"):
            return self.stream()
        self.answer(201, json.dumps({"path": self.path, "body": body.decode()}).encode(), "application/json")

    def answer(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in PIECES:  # written at once: only the chunks tell the pieces apart
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A stand-in replica (also the proxy) and a real front before it; a route's first replica port is closed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replica)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with refused_port() as closed:
        live, dead = f"http://127.0.0.1:{server.server_port}", f"http://127.0.0.1:{closed}"
        Replica.routes = {"/": [live], "/predictions/m": [dead, live], "/predictions/streamer": [live]}
        work = tmp_path_factory.mktemp("front")
        (work / "key").write_text(KEY)
        port = free_port()
        proc = ingress.spawn(port, server.server_port, LIMIT, work / "key", work / "front.log", 60)
        yield f"http://127.0.0.1:{port}", proc
        ingress.stop(proc)
    server.shutdown()


def test_routes_pick_the_longest_prefix_at_a_path_segment_in_turn_else_the_proxy():
    routes = Routes("http://proxy")
    routes.update({"/": ["http://router"], "/predictions/a": ["http://a1", "http://a2"], "/predictions/ab": []})
    assert [routes.pick("/predictions/a") for _ in range(3)] == ["http://a1", "http://a2", "http://a1"]
    assert routes.pick("/predictions/a/2.0") in ("http://a1", "http://a2")
    assert routes.pick("/predictions/ab") == "http://router"  # no replica running yet: the router's way
    assert routes.pick("/predictions/abc") == "http://router"
    routes.update({})
    assert routes.pick("/ping") == "http://proxy"


def test_a_prediction_reaches_a_live_replica_even_when_its_first_port_refuses(served):
    url, _ = served
    Replica.seen.clear()
    for i in range(4):  # in turn: every other pick is the closed port, tried again on the live one
        answer = requests.post(
            f"{url}/predictions/m/1.0?x={i}",
            data=b"[1, 2]",
            timeout=30,
            headers={"Authorization": "Bearer sent-as-is", "Content-Type": "application/json"},
        )
        assert answer.status_code == 201 and answer.headers["content-type"] == "application/json"
        assert answer.json() == {"path": f"/predictions/m/1.0?x={i}", "body": "[1, 2]"}
    assert [(a, b) for _, a, b in Replica.seen] == [("Bearer sent-as-is", b"[1, 2]")] * 4


def test_a_streamed_answer_keeps_each_chunk_the_replica_sent(served):
    url, _ = served
    answer = requests.post(f"{url}/predictions/streamer", data=b"go", stream=True, timeout=30)
    assert answer.status_code == 200 and answer.headers["content-type"] == "text/plain"
    assert list(answer.raw.read_chunked()) == PIECES


def test_a_body_over_the_limit_gets_torchserves_413_and_is_not_sent_on(served):
    url, _ = served
    Replica.seen.clear()
    for body in (b"x" * (LIMIT + 1), iter([b"x" * 600, b"x" * 600])):  # declared, and chunked
        answer = requests.post(f"{url}/predictions/m", data=body, timeout=30)
        assert answer.status_code == 413 and answer.json()["type"] == "RequestEntityTooLarge"
    assert Replica.seen == []


def test_the_port_taken_is_an_error_with_a_hint(served, tmp_path):
    url, _ = served
    (tmp_path / "key").write_text(KEY)
    taken = int(url.rsplit(":", 1)[1])
    with pytest.raises(ServerError) as err:
        ingress.spawn(taken, taken, LIMIT, tmp_path / "key", tmp_path / "front.log", 60)
    assert "did not start on 127.0.0.1" in str(err.value) and "Hint:" in str(err.value)
    assert "address already in use" in str(err.value).lower()


def test_a_front_whose_owners_pipe_closes_exits_and_frees_its_port(served, tmp_path):
    _, proxy = served[0].rsplit(":", 1)
    (tmp_path / "key").write_text(KEY)
    port = free_port()
    proc = ingress.spawn(port, int(proxy), LIMIT, tmp_path / "key", tmp_path / "front.log", 60)
    proc.stdin.close()  # what the owner's exit, or its death, does
    assert proc.wait(30) == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_route_the_router_drops_is_left_by_the_front_as_soon_as_refresh_returns(served):
    url, proc = served
    before, live = dict(Replica.routes), Replica.routes["/"][0]

    def reached() -> str:
        answer = requests.post(
            f"{url}/predictions/gone", data=b"[1]", timeout=30, headers={"Authorization": "Bearer k"}
        )
        return answer.json()["path"]

    try:
        Replica.routes = {**before, "/predictions/gone": [f"{live}/-/set-a"]}  # a replica set serves it
        ingress.refresh(proc)
        assert reached() == "/-/set-a/predictions/gone"
        Replica.routes = before  # it left its set (an unregister): the router answers it now
        ingress.refresh(proc)  # at once, not within REFRESH_S: what the engine's unregister waits for
        assert reached() == "/predictions/gone"
    finally:
        Replica.routes = before


def test_refresh_returns_at_once_for_a_front_that_stopped(served, tmp_path):
    _, proxy = served[0].rsplit(":", 1)
    (tmp_path / "key").write_text(KEY)
    proc = ingress.spawn(free_port(), int(proxy), LIMIT, tmp_path / "key", tmp_path / "front.log", 60)
    ingress.stop(proc)
    ingress.refresh(proc, timeout_s=600)  # its pipes are closed: nothing to wait for (the test's timeout otherwise)


@pytest.mark.parametrize(
    ("body", "reached"),
    [
        (b'{"model": "m", "messages": []}', "/predictions/m/-/v1/chat/completions"),  # its own replica answers
        (b'{"model": "other", "messages": []}', "/v1/chat/completions"),  # no replica of its own: the router
        (b"[not json", "/v1/chat/completions"),  # the router's 400 says why
    ],
)
def test_a_completion_goes_to_a_replica_of_the_model_it_names(served, body, reached):
    url, _ = served
    Replica.seen.clear()
    answer = requests.post(f"{url}/v1/chat/completions", data=body, timeout=30)
    assert answer.json()["path"] == reached and [path for path, _, _ in Replica.seen][-1] == reached


@pytest.mark.parametrize(
    ("path", "reached"),
    [
        ("/explanations/m", "/predictions/m/-/explanations"),  # its own replica explains, behind its own key
        ("/explanations/other", "/explanations/other"),  # no replica of its own: the router
        ("/explanations/m/2.0", "/explanations/m/2.0"),  # another version: the router finds its application
    ],
)
def test_an_explanation_goes_to_a_replica_of_its_model_with_the_callers_key(served, path, reached):
    url, _ = served
    Replica.seen.clear()
    answer = requests.post(f"{url}{path}", json={"x": [1]}, headers={"Authorization": "Bearer kernel-key"}, timeout=30)
    assert answer.json()["path"] == reached and Replica.seen[-1][:2] == (reached, "Bearer kernel-key")
