"""OpenAI's Responses API over a model's pieces, with no server: the sample a request stands for, the response object
and the semantic events as the official client's own types read them, max_output_tokens making it incomplete,
stateless fields refused with a hint, a failure mid-stream ending with the error events."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from msnb.templates.msnb_runtime.api.openai import RESPONSES, ApiError
from msnb.templates.msnb_runtime.api.v1 import answer, parse

BODY = {"model": "gen", "input": "the cat"}
EVENTS = TypeAdapter(ResponseStreamEvent)


def run(body: dict, pieces: list[str]) -> tuple[object, bytes]:
    """A request answered from ``pieces`` as an engine's driver does: feed until done, then close."""
    out_, raw = answer(parse(RESPONSES, body)), b""
    for piece in pieces:
        raw += out_.feed(piece)
        if out_.done:
            break
    return out_, raw + out_.close()


def events(raw: bytes) -> list:
    """The server-sent events, each read by the official client's own event types (its name equal to its type)."""
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            assert name.startswith("event: ") and data.startswith("data: ")
            out.append(EVENTS.validate_python(json.loads(data[len("data: ") :])))
            assert out[-1].type == name[len("event: ") :]
    return out


def test_input_and_instructions_reach_preprocess_as_the_chat_messages_they_stand_for():
    request = parse(RESPONSES, {**BODY, "instructions": "be brief", "temperature": 0.5})
    assert request.sample["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "the cat"},
    ]
    assert request.sample["temperature"] == 0.5 and json.loads(request.upstream(b"{}")) == request.sample
    parts = [
        {"role": "user", "content": [{"type": "input_text", "text": "the "}, {"type": "input_text", "text": "cat"}]},
        {"type": "message", "role": "assistant", "content": "sat"},
    ]
    assert parse(RESPONSES, {**BODY, "input": parts}).sample["messages"] == [
        {"role": "user", "content": "the cat"},
        {"role": "assistant", "content": "sat"},
    ]


def test_a_whole_answer_is_a_completed_response_the_client_reads_with_its_usage():
    done, raw = run(BODY, ["a", "b", "c"])
    response = Response.model_validate_json(done.body())
    assert raw == b"" and response.output_text == "abc" and response.status == "completed"
    assert response.usage.output_tokens == 3 and response.store is False and response.id.startswith("resp_")


def test_max_output_tokens_makes_the_response_incomplete_with_its_reason():
    done, _ = run({**BODY, "max_output_tokens": 2}, ["a", "b", "c"])
    response = Response.model_validate_json(done.body())
    assert response.output_text == "ab" and response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"


def test_a_stream_is_the_semantic_events_in_order_with_each_piece_as_a_delta():
    _, raw = run({**BODY, "stream": True}, ["a", "b", "c"])
    got = events(raw)
    assert [e.type for e in got] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in got] == list(range(len(got)))
    assert [e.delta for e in got if e.type == "response.output_text.delta"] == ["a", "b", "c"]
    assert got[-1].response.output_text == "abc" and got[-1].response.usage.output_tokens == 3


def test_a_failure_mid_stream_ends_with_the_error_event_then_response_failed():
    out_ = answer(parse(RESPONSES, {**BODY, "stream": True}))
    raw = out_.feed("a") + out_.fail(ApiError(500, "boom. Hint: read the logs.", "server_error"))
    *_, error, failed = events(raw)
    assert error.type == "error" and error.message == "boom. Hint: read the logs."
    assert failed.type == "response.failed" and failed.response.error.message == "boom. Hint: read the logs."


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("previous_response_id", "resp_1", "send the earlier turns in `input`"),
        ("conversation", "conv_1", "Hint:"),
        ("tools", [{"type": "function", "name": "f"}], "MCP tool"),
        ("n", 2, "one completion per request"),
        ("background", True, "Hint:"),
        ("text", {"format": {"type": "json_object"}}, "Hint:"),
        ("input", [{"type": "function_call_output", "call_id": "c", "output": "x"}], "function_call_output"),
        ("input", [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], "text parts"),
        ("input", 3, "string or a non-empty list"),
        ("max_output_tokens", 0, "positive integer"),
        ("instructions", ["x"], "string"),
    ],
)
def test_what_msnb_cannot_honour_is_a_400_naming_the_field(field, value, says):
    with pytest.raises(ApiError) as err:
        parse(RESPONSES, {**BODY, field: value})
    assert err.value.status == 400 and err.value.param == field and says in err.value.message
