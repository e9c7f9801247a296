"""The OpenAI and MCP protocols over a model's pieces, with no server: requests refused naming their field, stop strings
cut across pieces, max_tokens closing the stream, OpenAI's JSON and server-sent events, MCP's JSON-RPC steps."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msnb.templates.msnb_runtime.api import mcp
from msnb.templates.msnb_runtime.api.openai import CHAT, TEXT, ApiError, Completion, parse, unauthorised
from msnb.templates.msnb_runtime.api.v1 import refused
from msnb.templates.msnb_runtime.api.wire import DONE, Answer, models

CHAT_BODY = {"model": "gen", "messages": [{"role": "user", "content": "the cat"}]}


def events(raw: bytes) -> list:
    """The server-sent events' payloads ([DONE] as the string)."""
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            assert block.startswith("data: ")
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def run(body: dict, pieces: list[str], kind: str = CHAT) -> tuple[Answer, bytes]:
    """A request answered from ``pieces`` as an engine's driver does: feed until done, then close."""
    answer, out = Answer(parse(kind, body)), b""
    for piece in pieces:
        out += answer.feed(piece)
        if answer.done:
            break
    return answer, out + answer.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("tools", [{"type": "function"}]),
        ("tool_choice", "auto"),
        ("logprobs", True),
        ("echo", True),
        ("response_format", {"type": "json_object"}),
        ("best_of", 3),
    ],
)
def test_a_field_msnb_cannot_honour_is_a_400_naming_it(field, value):
    with pytest.raises(ApiError) as err:
        parse(CHAT, {**CHAT_BODY, field: value})
    assert err.value.status == 400 and err.value.param == field and err.value.kind == "invalid_request_error"
    assert f"`{field}`" in err.value.message and "Hint:" in err.value.message
    assert err.value.body()["error"]["param"] == field


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        (CHAT, {"messages": []}, "model"),
        (CHAT, {"model": "gen"}, "messages"),
        (TEXT, {"model": "g"}, "prompt"),
        (TEXT, {"model": "g", "prompt": ["a", "b"]}, "prompt"),
        (CHAT, {**CHAT_BODY, "max_tokens": 0}, "max_tokens"),
        (CHAT, {**CHAT_BODY, "stop": ["a"] * 5}, "stop"),
        (CHAT, {**CHAT_BODY, "stream": "yes"}, "stream"),
    ],
)
def test_a_malformed_request_names_its_field(kind, body, field):
    with pytest.raises(ApiError) as err:
        parse(kind, body)
    assert err.value.status == 400 and err.value.param == field


def test_the_whole_body_is_the_sample_and_sampling_fields_reach_the_handler():
    body = {**CHAT_BODY, "temperature": 0.3, "max_tokens": 5, "stop": "x", "n": 1}
    request = parse(CHAT, body)
    assert request.sample == body and request.max_tokens == 5 and request.stop == ("x",)


def test_a_stop_string_split_over_pieces_cuts_the_text_and_nothing_of_it_is_sent():
    answer, raw = run({**CHAT_BODY, "stop": ["END"], "stream": True}, ["ab", "cE", "N", "Dzz", "more"])
    got = events(raw)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in got if isinstance(e, dict))
    assert text == "abc" and answer.completion.finish_reason == "stop"
    assert got[-1] == "[DONE]" and got[-2]["choices"][0]["finish_reason"] == "stop"
    assert answer.completion.pieces == 4  # the piece after the stop was never read


def test_a_held_tail_that_is_no_stop_after_all_is_sent():
    completion = Completion(parse(TEXT, {"model": "g", "prompt": "p", "stop": ["abc"]}))
    assert completion.feed("xa") == "x" and completion.feed("bd") == "abd" and completion.end() == ""
    assert completion.text == "xabd" and completion.finish_reason == "stop"


@given(st.lists(st.text(alphabet="abc", max_size=4), max_size=8), st.text(alphabet="abc", min_size=1, max_size=3))
def test_the_text_is_the_joined_pieces_cut_at_the_first_stop_however_they_are_cut(pieces, stop):
    completion = Completion(parse(TEXT, {"model": "g", "prompt": "p", "stop": stop}))
    sent = "".join(completion.feed(p) for p in pieces) + completion.end()
    joined = "".join(pieces)
    assert sent == (joined[: joined.index(stop)] if stop in joined else joined)


def test_max_tokens_closes_after_that_many_pieces_with_finish_reason_length_and_counts_them():
    answer, _ = run({**CHAT_BODY, "max_tokens": 3}, ["a", "b", "c", "d"])
    body = json.loads(answer.body())
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"] == "abc"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3}


def test_a_completions_stream_is_text_completion_chunks_then_done_with_usage_when_asked():
    body = {"model": "g", "prompt": "p", "stream": True, "stream_options": {"include_usage": True}}
    _, raw = run(body, ["x", "y"], TEXT)
    got = events(raw)
    assert [e["choices"][0]["text"] for e in got[:2]] == ["x", "y"] and got[0]["object"] == "text_completion"
    assert got[2]["choices"][0]["finish_reason"] == "stop" and got[3]["usage"]["completion_tokens"] == 2
    assert raw.endswith(DONE)


def test_the_401_and_the_models_list_have_openais_shape_and_the_list_holds_the_embedding_models():
    assert unauthorised().status == 401 and unauthorised().body()["error"]["code"] == "invalid_api_key"
    cards = {"emb": {"embeds": True}, "gen": {"streams": True}, "mlp": {"streams": False}}
    listed = models(cards)
    assert [m["id"] for m in listed["data"]] == ["emb", "gen"] and listed["object"] == "list"
    assert set(listed["data"][0]) == {"id", "object", "created", "owned_by"}
    assert set(models({"gen": {"streams": True, "key_sha256": "ab12"}})["data"][0]) == set(listed["data"][0])


def test_a_refused_key_is_told_where_the_key_that_works_is():
    shared = unauthorised("each process's models open with its own key: /tmp/r/users/PID/key_file.json").message
    assert shared == (
        "Incorrect API key provided. Hint: each process's models open with its own key: /tmp/r/users/PID/key_file.json."
    )
    assert "server.key_file" in unauthorised().message  # one server: its own key file


def test_mcp_initialize_answers_the_clients_version_and_notifications_get_202():
    msg = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}
    step = mcp.step(json.dumps(msg).encode())
    assert step.kind == "reply" and step.body["result"]["protocolVersion"] == "2025-06-18"
    assert mcp.step(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}').status == 202
    assert mcp.step(b"{").status == 400
    unknown = mcp.step(b'{"jsonrpc": "2.0", "id": 2, "method": "resources/list"}')
    assert unknown.body["error"]["code"] == mcp.METHOD_NOT_FOUND and "tools/call" in unknown.body["error"]["message"]


def test_mcp_a_call_names_its_tool_and_a_wrapped_input_is_its_one_argument():
    step = mcp.step(
        b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "gen", '
        b'"arguments": {"input": "the cat"}}}'
    )
    assert (step.kind, step.name) == ("call", "gen")
    assert mcp.sample({"wrapped": True}, step.arguments) == "the cat"
    reply = mcp.call_reply(step, ["a", 1])
    assert reply["result"]["structuredContent"] == {"result": ["a", 1]} and not reply["result"]["isError"]
    assert json.loads(reply["result"]["content"][0]["text"]) == ["a", 1]
    assert mcp.tool("gen", mcp.read_card(None, "gen"))["inputSchema"] == {"type": "object"}


def modern(method: str, params: dict | None = None, version: str = "2026-07-28", **headers: str) -> mcp.Step:
    """A stateless (2026-07-28) request as the official client sends it: the envelope in _meta, the headers."""
    meta = {mcp.META + "protocolVersion": version, mcp.META + "clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**(params or {}), "_meta": meta}}
    sent = {mcp.VERSION_HEADER: version, mcp.METHOD_HEADER: method, **headers}
    return mcp.step(json.dumps(body).encode(), sent)


def test_mcp_2026_discover_lists_the_stateless_revision_and_every_result_carries_its_result_type():
    found = modern("server/discover").body["result"]
    assert found["supportedVersions"] == ["2026-07-28"] and found["resultType"] == "complete"
    listed = modern("tools/list")
    assert listed.kind == "list" and listed.modern
    tools = mcp.tools_reply(listed, {"gen": {"streams": True}})["result"]
    assert tools["resultType"] == "complete" and tools["tools"][0]["outputSchema"]["required"] == ["result"]
    assert mcp.call_reply(modern("tools/call", {"name": "gen"}), "x")["result"]["resultType"] == "complete"
    assert "resultType" not in mcp.call_reply(mcp.Step("call", 1), "x")["result"]  # the handshake era's shape


def test_mcp_2026_an_unknown_revision_a_header_mismatch_and_an_unknown_method_are_refused_with_their_codes():
    newer = modern("server/discover", version="2027-01-01")
    assert (newer.status, newer.body["error"]["code"]) == (400, mcp.UNSUPPORTED_VERSION)
    assert newer.body["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2027-01-01"}
    mismatch = modern("tools/list", **{mcp.METHOD_HEADER: "tools/call"})
    assert (mismatch.status, mismatch.body["error"]["code"]) == (400, mcp.HEADER_MISMATCH)
    unknown = modern("prompts/list")
    assert (unknown.status, unknown.body["error"]["code"]) == (404, mcp.METHOD_NOT_FOUND)
    assert modern("initialize").body["error"]["code"] == mcp.METHOD_NOT_FOUND  # no handshake in this revision


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"prompt": 3}, "`prompt` must be of type string"),
        ({}, "`prompt` is missing"),
        ({"prompt": "x", "n": True}, "`n` must be of type integer"),
    ],
)
def test_mcp_a_tool_argument_of_the_wrong_type_is_named_with_a_hint(arguments, says):
    card = {
        "input_schema": {
            "type": "object",
            "properties": {"prompt": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["prompt"],
        }
    }
    problem = mcp.argument_problem(card, arguments)
    assert says in problem and "Hint:" in problem
    assert mcp.argument_problem(card, {"prompt": "x", "n": 2}) is None


def test_a_401_challenges_for_a_bearer_token_on_both_protocols():
    assert unauthorised().headers()["www-authenticate"].startswith("Bearer")
    status, headers, body = mcp.unauthorised(unauthorised().message, "Bearer")
    assert status == 401 and headers["www-authenticate"] == "Bearer" and "Hint:" in json.loads(body)["error"]["message"]


def test_a_refusal_before_the_body_is_read_takes_the_shape_of_the_protocol_its_path_asks():
    status, _, body = refused("/v1/chat/completions", 413, "The request body (7 MB) is over max_request_size")
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    assert "Hint: send less per request, or raise the server's max_request_size" in json.loads(body)["error"]["message"]
    _, _, body = refused("/mcp", 400, "malformed HTTP request")
    assert json.loads(body)["error"]["code"] == mcp.INVALID_REQUEST and "Hint:" in json.loads(body)["error"]["message"]
    assert refused("/predictions/m", 413, "too large") is None  # TorchServe's own shape: the front's
