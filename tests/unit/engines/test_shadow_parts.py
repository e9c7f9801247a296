"""`msnb shadow`'s parts without a server: which requests are mirrored and for which model, who answers (split,
cutover), what is counted (and how Prometheus reads it), how a pair is judged and a difference written."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from msnb.engines.shadow.exchange import Reply
from msnb.engines.shadow.mirror import Copy
from msnb.engines.shadow.pairs import DiffLog, Judge, steady
from msnb.engines.shadow.routes import MODELS_LIST, Route, route
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY, KeyFile, address
from msnb.engines.shadow.tally import Tally
from msnb.engines.shadow.traffic import EVERY_MODEL, Traffic
from msnb.errors import OptionError

API = {"api": True, "volatile": True}  # a route of OpenAI's API or MCP


def test_predictions_explanations_kserve_openai_and_mcp_are_mirrored_for_their_model_and_nothing_else():
    assert route("POST", "/predictions/m", b"") == Route("m")
    assert route("POST", "/predictions/m/2.0", b"") == Route("m", "2.0")
    assert route("POST", "/explanations/m", b"") == Route("m", path="explanations")
    assert route("POST", "/v1/models/m:predict", b"") == Route("m")
    assert route("POST", "/v1/models/m:explain", b"") == Route("m", path="explanations")
    assert route("POST", "/v2/models/m/versions/3/infer", b"") == Route("m", "3", volatile=True)
    assert route("POST", "/v1/chat/completions", b'{"model": "lm", "messages": []}') == Route("lm", **API)
    assert route("POST", "/v1/embeddings", b'{"model": "e", "input": "x"}') == Route("e", **API)
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "m", "arguments": {}}})
    assert route("POST", "/mcp", call.encode()) == Route("m", **API)
    assert route("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}') == Route("mcp", **API)
    assert route("GET", "/v1/models", b"") == Route(MODELS_LIST, **API)
    for method, path in (
        ("GET", "/ping"),
        ("GET", "/models"),
        ("POST", "/models"),
        ("GET", "/metrics"),
        ("POST", "/v1/models"),
        ("GET", "/api-description"),
    ):
        assert route(method, path, b"") is None, path  # the primary's alone


def test_a_split_share_is_spread_evenly_per_model_and_a_cutover_sends_every_request_to_the_candidate():
    traffic = Traffic(Tally(), split=50)
    assert [traffic.answerer("m") for _ in range(4)] == [PRIMARY, CANDIDATE, PRIMARY, CANDIDATE]
    traffic.set_split(10)
    assert [traffic.answerer("n") for _ in range(100)].count(CANDIDATE) == 10
    traffic.cutover(["m"])
    assert {traffic.answerer("m") for _ in range(5)} == {CANDIDATE} and traffic.answerer("other") == PRIMARY
    traffic.cutover()
    assert traffic.state()["cutover"] == [EVERY_MODEL, "m"] and traffic.answerer("other") == CANDIDATE
    with pytest.raises(OptionError, match="share is a percentage") as err:
        traffic.set_split(101)
    assert "Hint: give 0 to 100" in err.value.render()


def test_n_equal_answers_in_a_row_cut_a_model_over_and_say_so_with_the_counts():
    said, tally = [], Tally()
    traffic = Traffic(tally, cutover_after=3, say=said.append)
    tally.of("m").streak = 2
    traffic.compared("m")
    assert not said and traffic.answerer("m") == PRIMARY
    tally.of("m").streak, tally.of("m").equal, tally.of("m").requests = 3, 3, 4
    traffic.compared("m")
    assert [(e["event"], e["models"], e["by"]) for e in said] == [("cutover", ["m"], "--cutover-after 3")]
    assert said[0]["counts"]["m"]["equal"] == 3 and traffic.answerer("m") == CANDIDATE


def test_the_counts_are_prometheus_text_with_each_sides_latency_summary():
    tally = Tally()
    counts = tally.of('odd"name')
    counts.requests, counts.equal, counts.errors[CANDIDATE] = 3, 2, 1
    for seconds in (0.01, 0.02, 0.03):
        counts.took(PRIMARY, seconds)
    text = tally.prometheus({"split_percent": {(): 5.0}})
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    model = ("model", 'odd"name')
    assert samples[("msnb_shadow_requests_total", (model,))] == 3
    assert samples[("msnb_shadow_errors_total", (model, ("side", "candidate")))] == 1
    assert samples[("msnb_shadow_latency_seconds", (model, ("quantile", "0.5"), ("side", "primary")))] == 0.02
    assert samples[("msnb_shadow_latency_seconds_count", (model, ("side", "primary")))] == 3
    assert samples[("msnb_shadow_split_percent", ())] == 5.0
    assert tally.snapshot()['odd"name']["latency_ms"]["primary"] == {"p50": 20.0, "p99": 30.0}
    assert tally.snapshot()['odd"name']["latency_ms"]["candidate"] == {"p50": None, "p99": None}


def judged(tmp_path, body: bytes, primary: Reply, candidate: Reply | None, tolerance=(0.0, 0.0), answerer=PRIMARY):
    """One pair through a Judge writing to tmp_path/d.jsonl (``answerer`` answered, the other got the copy)."""
    tally, log = Tally(), DiffLog(tmp_path / "d.jsonl", limit=16)
    loop = asyncio.new_event_loop()
    copy = Copy(
        Route("m", "1.0"),
        "POST",
        "/predictions/m/1.0",
        body,
        CANDIDATE if answerer == PRIMARY else PRIMARY,
        b"",
        loop.create_future(),
    )
    answered, copied = (primary, candidate) if answerer == PRIMARY else (candidate, primary)
    Judge(tally, Traffic(tally), log, tolerance)(copy, answered, copied)
    loop.close()
    log.close()
    lines = (tmp_path / "d.jsonl").read_text().splitlines()
    return tally.of("m"), [json.loads(line) for line in lines]


def test_openai_and_mcp_answers_are_compared_without_the_ids_and_times_each_server_makes(tmp_path):
    def chat(ident: str, created: int, text: str) -> bytes:
        event = {"id": ident, "created": created, "choices": [{"delta": {"content": text}}]}
        return f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()

    assert steady(chat("chatcmpl-a", 1, "hi")) == steady(chat("chatcmpl-b", 2, "hi"))
    assert steady(chat("chatcmpl-a", 1, "hi")) != steady(chat("chatcmpl-a", 1, "ho"))
    assert steady(b"not json") == b"not json"
    loop = asyncio.new_event_loop()
    copy = Copy(Route("lm", **API), "POST", "/v1/chat/completions", b"{}", CANDIDATE, b"", loop.create_future())
    judge = Judge(Tally(), Traffic(Tally()), DiffLog(tmp_path / "d.jsonl"))
    assert judge.difference(copy, Reply(200, chat("x", 1, "hi"), 0.1), Reply(200, chat("y", 2, "hi"), 0.1)) is None
    loop.close()


def test_an_equal_pair_is_counted_and_a_different_one_is_one_line_with_both_answers_cut_to_the_limit(tmp_path):
    counts, lines = judged(
        tmp_path, b"{}", Reply(200, b'{"y": 0.5}', 0.01), Reply(200, b'{"y": 0.50001}', 0.02), tolerance=(1e-3, 0)
    )
    assert (counts.equal, counts.different, counts.streak, lines) == (1, 0, 1, [])
    big = b'{"x": "' + b"a" * 40 + b'"}'
    counts, lines = judged(tmp_path, big, Reply(200, b'{"y": 1}', 0.01), Reply(503, b"x" * 40, 0.25))
    assert (counts.equal, counts.different, counts.streak) == (0, 1, 0)
    (line,) = lines
    assert (line["kind"], line["model"], line["version"], line["answered_by"]) == ("difference", "m", "1.0", "primary")
    assert line["difference"] == "status 200 != 503"
    assert line["request"]["bytes"] == len(big) and len(line["request"]["sha256"]) == 64  # over the limit: a digest
    assert line["primary"] == {"status": 200, "body": '{"y": 1}', "bytes": 8, "cut": False, "latency_ms": 10.0}
    assert line["candidate"] == {"status": 503, "body": "x" * 16, "bytes": 40, "cut": True, "latency_ms": 250.0}


def test_a_candidate_that_gives_no_answer_is_its_error_and_starts_the_equal_run_over(tmp_path):
    counts, lines = judged(tmp_path, b"{}", Reply(200, b"1", 0.01), None)
    assert (counts.errors, counts.equal, counts.different, lines) == ({PRIMARY: 0, CANDIDATE: 1}, 0, 0, [])
    counts, _ = judged(tmp_path, b"{}", Reply(200, b"1", 0.01), None, answerer=CANDIDATE)  # it answered none
    assert counts.streak == 0 and counts.errors[CANDIDATE] == 0  # (the front counts the answering side's errors)


def test_an_address_is_http_host_port_and_a_key_file_is_read_again_when_it_changes(tmp_path):
    assert address("http://127.0.0.1:8080/", "--primary") == "http://127.0.0.1:8080"
    for bad in ("127.0.0.1:8080", "https://h:1", "http://h", "http://h:1/predictions", "http://h:x"):
        with pytest.raises(OptionError, match="is not a server's address"):
            address(bad, "--primary")
    keys = tmp_path / "key_file.json"
    keys.write_text(json.dumps({"inference": {"key": "one"}, "management": {"key": "m"}}))
    held = KeyFile(keys)
    assert held.header() == b"Bearer one"
    keys.write_text("two\n")  # renewed (a plain key file this time)
    held._looked = 0.0  # (as LOOK_S later)
    assert held.key() == "two"
