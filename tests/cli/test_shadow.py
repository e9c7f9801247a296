"""`msnb shadow` before a plain TorchServe (the primary), its copies to a second plain TorchServe or to msnb's
TorchServe serving the same archives (torch-model-archiver's): a client gets the primary's answers byte for byte,
the archive whose answers differ is found and logged (the others are not), a candidate killed under load loses no
client request, a canary share and a cutover move traffic, and bad input is said with a Hint."""

from __future__ import annotations

import json
import re
import shutil
import threading

import pytest
from helpers import ECHO, REQUEST_IDS, TS_STREAMING, build_mar, poll, processes_naming, refused_port, run
from plain_ts import PlainServer, serving
from shadow_run import Front, ask, side_options

pytestmark = pytest.mark.server
JSON = {"content-type": "application/json"}
MODELS = ["echo", "ids", "stream"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("shadow-store")
    (root / "store").mkdir()
    for name, source in (("echo", ECHO), ("ids", REQUEST_IDS), ("stream", TS_STREAMING)):
        shutil.copy(build_mar(root / name, name, source), root / "store" / f"{name}.mar")
    return root / "store"


@pytest.fixture(scope="module")
def primary(store, tmp_path_factory):
    with serving(store, tmp_path_factory.mktemp("primary"), MODELS) as server:
        yield server


@pytest.fixture(scope="module")
def candidate(store, tmp_path_factory):
    with serving(store, tmp_path_factory.mktemp("candidate"), MODELS) as server:
        yield server


def sides(primary: PlainServer, candidate: PlainServer) -> list:
    return side_options("primary", primary) + side_options("candidate", candidate)


def same_but_request_id(a, b) -> bool:
    """Two answers alike but for the request id TorchServe gives each one."""
    drop = lambda headers: [(k, v) for k, v in headers if k != "x-request-id"]  # noqa: E731
    return (a.status, drop(a.headers), a.body) == (b.status, drop(b.headers), b.body)


ASKED = [
    ("/predictions/echo", json.dumps({"a": 1}).encode(), JSON),
    ("/predictions/echo", b"\x00\x01raw bytes", {"content-type": "application/octet-stream"}),
    ("/predictions/echo", json.dumps({"reject": True}).encode(), JSON),  # the handler's own 422
    ("/predictions/echo/1.0", json.dumps([1, 2.5, "x"]).encode(), JSON),
]


@pytest.mark.timeout(600)
def test_the_front_answers_as_the_primary_byte_for_byte_and_logs_only_the_archive_that_differs(
    primary, candidate, tmp_path
):
    front = Front(tmp_path, *sides(primary, candidate), "--max-request-size", 65536)
    key = primary.headers()  # clients keep the primary's key: only the address changes
    try:
        for path, body, headers in ASKED * 3:
            direct, through = (
                ask(primary.inference_url, path, body, {**headers, **key}),
                ask(front.url, path, body, {**headers, **key}),
            )
            assert same_but_request_id(direct, through), (direct, through)
        streamed, plain = (
            ask(front.url, "/predictions/stream", b"{}", {**JSON, **key}),
            ask(primary.inference_url, "/predictions/stream", b"{}", {**JSON, **key}),
        )
        assert streamed.header("transfer-encoding") == "chunked" and streamed.body == plain.body
        assert streamed.body == b"intermediate_response" * 3 + b"hello world "
        ids = [ask(front.url, "/predictions/ids", b"{}", {**JSON, **key}) for _ in range(4)]
        assert all(a.status == 200 and re.fullmatch(rb"[0-9a-f-]{36}", a.body) for a in ids)
        assert (
            ask(front.url, "/ping", headers=key, method="GET").body
            == ask(primary.inference_url, "/ping", headers=key, method="GET").body
        )
        refused = ask(front.url, "/predictions/echo", b"{}", JSON)  # no key
        assert refused.status == 400 and b"InvalidKeyException" in refused.body
        too_big = ask(front.url, "/predictions/echo", b"x" * 100_000, {**JSON, **key})
        assert too_big.status == 413 and b"RequestEntityTooLarge" in too_big.body and b"Hint:" in too_big.body
        assert ask(front.url, "/predictions/echo", b"{}", {**JSON, **key}).status == 200  # the front serves on
        counts = poll(lambda: _settled(front, {"echo": 13, "ids": 4, "stream": 1}), 60, "every pair judged")
        assert counts["echo"]["equal"] == 13 and counts["echo"]["different"] == 0
        assert counts["stream"]["equal"] == 1
        assert counts["ids"]["different"] == 4 and counts["ids"]["equal"] == 0
        assert all(c["candidate_errors"] == c["dropped"] == 0 for c in counts.values())
        assert counts["echo"]["latency_ms"]["primary"]["p99"] > 0 and counts["echo"]["latency_ms"]["candidate"]["p50"]
        logged = front.differences()
        assert [d["model"] for d in logged] == ["ids"] * 4, logged
        first = logged[0]
        assert first["primary"]["status"] == first["candidate"]["status"] == 200 and first["answered_by"] == "primary"
        assert first["primary"]["body"] != first["candidate"]["body"] and first["request"]["url"] == "/predictions/ids"
        # two request ids (random) differ first where they differ, byte 0 only 15 times in 16
        at = next(
            i for i, pair in enumerate(zip(first["primary"]["body"], first["candidate"]["body"])) if len(set(pair)) > 1
        )
        assert first["difference"].startswith(f"byte {at}:") and first["candidate"]["latency_ms"] > 0 and first["time"]
        metrics = ask(front.metrics_url, "/metrics", method="GET").body.decode()
        assert 'msnb_shadow_different_total{model="ids"} 4' in metrics
        assert 'msnb_shadow_equal_total{model="echo"} 13' in metrics
        assert json.loads(front.command("status", "--json").stdout)["models"]["ids"]["different"] == 4
        table = front.command("status")
        assert re.search(r"^ids\s+4\s+0\s+4\s+0\s+0\s+4/0\s", table.stdout, re.M), table.stdout
    finally:
        code, out = front.stop()
    assert code == 0, out
    assert out.count("goes to the primary only") == 1 and "msnb shadow stopped" in out
    assert not front.state_file.exists()


def _settled(front: Front, expected: dict[str, int]) -> dict | None:
    """Every model's counts once each of its requests has its pair judged (equal, different or an error)."""
    models = front.status()["models"]
    done = all(
        (c := models.get(name, {})).get("requests") == n and c["equal"] + c["different"] + c["candidate_errors"] == n
        for name, n in expected.items()
    )
    return models if done else None


@pytest.mark.timeout(600)
def test_split_50_is_answered_by_both_half_each_and_30_equal_answers_cut_over(primary, candidate, tmp_path):
    front = Front(tmp_path, *sides(primary, candidate), "--split", "50", "--cutover-after", "30")
    key = {**JSON, **primary.headers()}
    try:
        for i in range(20):
            answer = ask(front.url, "/predictions/echo", json.dumps({"i": i}).encode(), key)
            assert json.loads(answer.body) == {"echo": {"i": i}, "batch": 1}
        assert poll(lambda: front.model("echo").get("answered") == {"primary": 10, "candidate": 10}, 30)
        poll(
            lambda: ask(front.url, "/predictions/echo", b"{}", key).status == 200 and front.status()["cutover"],
            120,
            "the cutover after 30 equal answers in a row",
        )
        before = front.model("echo")["answered"]
        for _ in range(5):
            assert ask(front.url, "/predictions/echo", b"{}", key).status == 200
        after = poll(lambda: (a := front.model("echo")["answered"])["candidate"] == before["candidate"] + 5 and a, 30)
        assert after["primary"] == before["primary"], "after the cutover the candidate answers, the primary shadows"
        cut = [line for line in front.differences() if line["kind"] == "cutover"]
        assert [(c["models"], c["by"]) for c in cut] == [(["echo"], "--cutover-after 30")]
        assert cut[0]["counts"]["echo"]["equal_in_a_row"] >= 30 and cut[0]["counts"]["echo"]["different"] == 0
        refused = front.command("split", "200")
        assert refused.returncode == 2 and "split 200: the share is a percentage" in refused.stderr
        assert "Hint: give 0 to 100" in refused.stderr
        everything = front.command("cutover")
        assert everything.returncode == 0 and "the candidate answers every model" in everything.stdout
        assert ask(front.url, "/predictions/ids", b"{}", key).status == 200
        assert poll(lambda: front.model("ids").get("answered") == {"primary": 0, "candidate": 1}, 30)
    finally:
        code, out = front.stop()
    assert code == 0 and "cutover (--cutover-after 30): the candidate answers echo" in out, out


@pytest.mark.timeout(900)
def test_a_candidate_killed_under_load_loses_no_client_request(primary, store, tmp_path):
    """The candidate here is msnb's TorchServe serving the STORE, started by `msnb shadow` for it."""
    front = Front(
        tmp_path,
        str(store),
        "--engine",
        "torchserve",
        *side_options("primary", primary),
        timeout=400,
    )
    workdir = re.search(r"candidate: TorchServe at \S+ \(workdir (\S+)\)", front.output()).group(1)
    key, answers, lock = {**JSON, **primary.headers()}, [], threading.Lock()

    def client(n: int) -> None:
        for i in range(40):
            got = ask(front.url, "/predictions/echo", json.dumps({"c": n, "i": i}).encode(), key)
            with lock:
                answers.append((got.status, json.loads(got.body) == {"echo": {"c": n, "i": i}, "batch": 1}))

    try:
        clients = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in clients:
            thread.start()
        poll(lambda: len(answers) >= 80, 300, "a quarter of the requests answered")
        for proc in processes_naming(workdir):
            proc.kill()  # the candidate crashes: Java, its workers, its watchdog
        for thread in clients:
            thread.join(300)
        assert len(answers) == 320 and all(status == 200 and right for status, right in answers), answers
        counts = poll(lambda: _settled(front, {"echo": 320}), 120, "every pair judged")
        assert counts["echo"]["candidate_errors"] > 0 and counts["echo"]["different"] == 0
        assert counts["echo"]["answered"] == {"primary": 320, "candidate": 0}
    finally:
        code, out = front.stop()
    assert code == 0, out


def test_bad_input_is_said_with_a_hint(primary, candidate, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MSNB_STATE_DIR", str(tmp_path / "state"))
    with refused_port() as closed:
        down = f"http://127.0.0.1:{closed}"
        code, _, err = run(capsys, "shadow", "--primary", down, "--candidate", candidate.inference_url)
    assert code == 1 and f"The primary at {down} does not answer" in err and "Hint: start your TorchServe" in err
    code, _, err = run(
        capsys,
        "shadow",
        "--primary",
        primary.inference_url,
        "--primary-token-file",
        primary.key_file,
        "--candidate",
        candidate.inference_url,
    )
    assert code == 2 and f"The candidate at {candidate.inference_url} asks for an inference key" in err, err
    assert "Hint: give --candidate-token-file KEY_FILE" in err
    code, _, err = run(capsys, "shadow", "--primary", "127.0.0.1:8080", "--candidate", candidate.inference_url)
    assert code == 2 and "is not a server's address" in err and "Hint: give it as http://HOST:PORT" in err
    code, _, err = run(capsys, "shadow", "--primary", primary.inference_url)
    assert code == 2 and "takes one candidate" in err and "Hint:" in err
    code, _, err = run(capsys, "shadow", "status")
    assert code == 2 and "No `msnb shadow` is running" in err and "Hint: start one" in err
