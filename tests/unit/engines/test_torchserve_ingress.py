"""msnb's /v1 front beside TorchServe (msnb.engines.torchserve.ingress), the real front before a stand-in for
TorchServe's inference API: an HTTP server that streams a model's pieces as TorchServe does (one HTTP chunk each),
cuts an answer midway, answers an error, or streams JSON lines. The front before a real TorchServe, with the official
clients, is tested in tests/server/test_openai_mcp_server.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest
from api_clients import openai_client, streamed_text
from helpers import poll

from msnb.engines.torchserve.ingress import Ingress
from msnb.templates.msnb_runtime.handler.cancel import CANCEL_HEADER

KEY = "front-test-key"
PIECES = ["the", " cat", " sat", " on", " the", " mat"]


class TorchServe(BaseHTTPRequestHandler):
    """/predictions/NAME as TorchServe answers it: ``lm`` streams PIECES (the second one in two writes), ``cut``
    stops after two pieces without the closing chunk, ``broken`` answers the handler's 500, ``values`` streams JSON
    lines."""

    protocol_version = "HTTP/1.1"
    seen: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        name = self.path.rsplit("/", 1)[1]
        self.seen.append((name, self.headers.get("Authorization"), self.headers.get(CANCEL_HEADER), json.loads(body)))
        if name == "broken":
            error = json.dumps({"error": "preprocess failed", "hint": "send a prompt"}).encode()
            return self.head(500, "application/json", {"Content-Length": str(len(error))}, error)
        self.head(
            200,
            "application/jsonl" if name == "values" else "text/plain; charset=utf-8",
            {"Transfer-Encoding": "chunked"},
        )
        pieces = ['{"v": 1}\n'] if name == "values" else PIECES[:2] if name == "cut" else PIECES
        for number, piece in enumerate(pieces):
            data = piece.encode()
            if number == 1:  # one chunk in two writes: still one piece
                self.wfile.write(b"%x\r\n%s" % (len(data), data[:2]))
                self.wfile.flush()
                time.sleep(0.01)  # the front reads the first half on its own (not a synchronisation)
                self.wfile.write(data[2:] + b"\r\n")
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if name == "cut":
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def head(self, status: int, kind: str, headers: dict, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Keys:
    def header(self, kind: str) -> dict:
        return {"Authorization": f"Bearer {KEY}"}


class Client:
    def __init__(self, url: str):
        self.inference_url, self.keys = url, Keys()

    def predict_timeout(self, name: str, version: str | None = None) -> float:
        return 30.0


class Models:
    """TorchServeModels' part the front's completions use: every model streams, except ``mlp``."""

    def __init__(self, url: str, cancel_dir: Path):
        self._client, self.cancel_dir = Client(url), cancel_dir

    def client(self) -> Client:
        return self._client

    def cached(self, name: str) -> dict | None:
        return self.card(name)

    def card(self, name: str) -> dict | None:
        return {"streams": name != "mlp"} if name in ("lm", "cut", "broken", "values", "mlp") else None

    def streaming(self) -> list[str]:
        return ["broken", "cut", "lm", "values"]  # sorted, as TorchServeModels


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), TorchServe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cancels = tmp_path_factory.mktemp("cancels")
    api = Ingress(Models(f"http://127.0.0.1:{server.server_port}", cancels), lambda: Keys().header("inference")).start()
    yield api, cancels
    url = api.url
    api.stop()
    server.shutdown()
    assert api.url == "" and not listening(url)


def listening(url: str) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=2).close()
        return True
    except OSError:
        return False


def client(front) -> openai.OpenAI:
    return openai_client(f"{front[0].url}/v1", KEY)


def test_pieces_stream_as_torchserve_chunked_them_and_the_whole_answer_joins_them(front):
    pieces, finish = streamed_text(client(front), "lm", "hi")
    assert pieces == PIECES and finish == "stop"
    whole = client(front).completions.create(model="lm", prompt="hi")
    assert whole.choices[0].text == "".join(PIECES) and whole.choices[0].finish_reason == "stop"
    name, key, stream_id, body = TorchServe.seen[-1]
    assert (name, key, body["prompt"]) == ("lm", f"Bearer {KEY}", "hi") and len(stream_id) == 32


def test_max_tokens_counts_pieces_not_reads_and_tells_the_worker_its_stream_ended(front):
    pieces, finish = streamed_text(client(front), "lm", "hi", max_tokens=2)
    assert pieces == PIECES[:2] and finish == "length"  # the second piece came in two reads
    stream_id = TorchServe.seen[-1][
        2
    ]  # msnb_runtime.handler.cancel: the worker's generator stops at its next piece; the front
    poll(lambda: (front[1] / stream_id).exists(), 10, "the stream's end marked")  # marks it after the client's [DONE]


def test_an_answer_torchserve_cut_midway_ends_the_stream_with_an_error_event(front):
    with pytest.raises(openai.APIError, match="ended the answer midway"):
        streamed_text(client(front), "cut", "hi")
    pieces, _ = streamed_text(client(front), "lm", "again")  # the front and its connections run on
    assert pieces == PIECES


def test_the_handlers_error_answer_and_a_json_lines_stream_are_openai_errors(front):
    with pytest.raises(openai.InternalServerError, match="preprocess failed Hint: send a prompt"):
        client(front).completions.create(model="broken", prompt="hi")
    with pytest.raises(openai.BadRequestError, match="streams JSON values"):
        client(front).completions.create(model="values", prompt="hi")
    with pytest.raises(openai.BadRequestError, match="does not stream"):
        client(front).completions.create(model="mlp", prompt="hi")
    with pytest.raises(openai.NotFoundError, match="the streaming models served here: broken, cut, lm, values"):
        client(front).completions.create(model="nope", prompt="hi")


def test_a_wrong_key_an_unknown_path_and_a_malformed_request_get_openais_error_shape(front):
    with pytest.raises(openai.AuthenticationError):
        openai_client(f"{front[0].url}/v1", "wrong").completions.create(model="lm", prompt="hi")
    port = int(front[0].url.rsplit(":", 1)[1])
    for request, status in (
        (b"GET /v2/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"404"),
        (b"NOT HTTP\r\n\r\n", b"400"),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(request)
            answer = sock.recv(65536)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split()[1] == status and "message" in json.loads(body)["error"]


def raw(port: int, request: bytes) -> tuple[bytes, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split()[1], json.loads(body)


@pytest.mark.parametrize("path", ["/v1/models", "/mcp"])
def test_a_foreign_host_or_origin_is_refused_with_403_and_a_hint_and_loopback_names_pass(front, path):
    port = int(front[0].url.rsplit(":", 1)[1])
    method = b"GET" if path == "/v1/models" else b"POST"
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}' if path == "/mcp" else b""
    key = f"Authorization: Bearer {KEY}\r\n".encode()

    def ask(host: bytes, origin: bytes = b"") -> tuple[bytes, object]:
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\n%s%s" % (method, path.encode(), host, origin, key)
        return raw(port, head + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    for host, origin in ((b"evil.example.com", b""), (b"127.0.0.1:%d" % port, b"Origin: http://evil.example.com\r\n")):
        status, answer = ask(host, origin)
        said = answer["error"]["message"]
        assert status == b"403" and "is not allowed at this address" in said and "Hint:" in said, answer
    for host in (b"localhost:%d" % port, b"127.0.0.1", b"[::1]:%d" % port):
        assert ask(host, b"Origin: http://localhost:3000\r\n")[0] != b"403", host  # past the door


def test_a_torchserve_that_is_not_there_is_a_503_naming_how_to_start_it(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        gone = sock.getsockname()[1]  # closed again: nothing listens there
    api = Ingress(Models(f"http://127.0.0.1:{gone}", tmp_path), lambda: Keys().header("inference")).start()
    try:
        with pytest.raises(openai.APIStatusError, match="(?s)TorchServe did not answer.*server.start()") as err:
            openai_client(f"{api.url}/v1", KEY).completions.create(model="lm", prompt="hi")
        assert err.value.status_code == 503
    finally:
        api.stop()
