"""OpenAI's and MCP's official clients against a notebook's streaming LM on the Ray engine (the router's /v1 and /mcp):
the notebook's greedy generation whole, streamed and as a completion, max_tokens, the models list, a wrong key, the
MCP tool call equal to %ms_predict, two streams in one batch, and a client that leaves mid-stream."""

from __future__ import annotations

import json

import openai
import pytest
from api_clients import concurrently, failure_text, mcp_tools, openai_client, streamed_response, streamed_text
from api_errors import EMBED, FLAKY, Walker, embedding
from charlm import API_BODY, API_DOC, MODEL_SOURCE, greedy, seeded_char_lm
from IPython.utils.capture import capture_output
from test_ray_notebook import cell

PROMPTS = ("the cat", "a dog sat")


def truth(prompt: str) -> str:
    return "".join(greedy(seeded_char_lm(), prompt))


def test_openai_and_mcp_clients_get_the_notebooks_generation_from_ray(
    ip, ray_session, ray_engine, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    cell(ip, MODEL_SOURCE)
    cell(
        ip, f'%%ms_handler rapi --batch-size 2 --max-batch-delay 300 --example \'{{"prompt": "the cat"}}\'\n{API_BODY}'
    )
    cell(ip, "%ms_serve rapi --engine ray")
    engine = ray_engine
    key = json.loads(engine.key_file.read_text())["inference"]["key"]
    client = openai_client(engine.openai_base_url, key)
    whole = client.chat.completions.create(model="rapi", messages=[{"role": "user", "content": "the cat"}])
    assert whole.choices[0].message.content == truth("the cat") and whole.usage.completion_tokens == 24
    pieces, finish = streamed_text(client, "rapi", "the cat")
    assert "".join(pieces) == truth("the cat") and len(pieces) > 1 and finish == "stop"
    assert client.completions.create(model="rapi", prompt="a dog sat").choices[0].text == truth("a dog sat")
    short, finish = streamed_text(client, "rapi", "the cat", max_tokens=4)
    assert "".join(short) == truth("the cat")[:4] and finish == "length"
    assert [m.id for m in client.models.list()] == ["rapi"]
    answered = client.responses.create(model="rapi", input="the cat", instructions="continue the text")
    assert answered.output_text == truth("the cat") and answered.status == "completed"
    deltas, kinds, final = streamed_response(client, "rapi", [{"role": "user", "content": "a dog sat"}])
    assert "".join(deltas) == truth("a dog sat") == final.output_text and kinds[-1] == "response.completed"
    deltas, kinds, final = streamed_response(client, "rapi", "the cat", max_output_tokens=4)
    assert "".join(deltas) == truth("the cat")[:4] and final.incomplete_details.reason == "max_output_tokens"
    with pytest.raises(openai.BadRequestError, match="Hint: leave `previous_response_id` out"):
        client.responses.create(model="rapi", input="x", previous_response_id=answered.id)
    with pytest.raises(openai.AuthenticationError):
        openai_client(engine.openai_base_url, "wrong").models.list()

    with capture_output():
        predicted = ip.run_line_magic("ms_predict", 'rapi --data \'{"prompt": "the cat"}\'')
    for mode in ("initialize", "discover"):
        tools, (called,) = mcp_tools(engine.mcp_url, key, [("rapi", {"prompt": "the cat"})], mode)
        assert [(t.name, t.description) for t in tools] == [("rapi", API_DOC)]
        assert called.structured_content == {"result": predicted} == {"result": truth("the cat")}
        assert "Hint: the API key" in failure_text(lambda mode=mode: mcp_tools(engine.mcp_url, "wrong", [], mode))

    got = concurrently({p: (lambda p=p: "".join(streamed_text(client, "rapi", p)[0])) for p in PROMPTS})
    assert got == {p: truth(p) for p in PROMPTS}
    leaving = client.chat.completions.create(model="rapi", messages=[{"role": "user", "content": "x"}], stream=True)
    next(iter(leaving))
    leaving.close()  # the client leaves after its first chunk; the others are still answered
    assert "".join(streamed_text(client, "rapi", "a dog sat")[0]) == truth("a dog sat")


WHOLE = """
import torch

def init_function():
    return torch.nn.Identity()

def preprocess(request):
    return torch.tensor([float(len(request))])

def postprocess(out):
    return {"n": float(out)}
"""


def test_embeddings_and_every_error_of_the_table_are_answered_on_ray_as_on_torchserve(
    ip, ray_session, ray_engine, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    cell(ip, f'%%ms_handler rflaky --example \'{{"prompt": "x"}}\'\n{FLAKY}')
    cell(ip, f"%%ms_handler rwhole\n{WHOLE}")
    cell(ip, f"%%ms_handler remb --embeddings --batch-size 4 --max-batch-delay 50\n{EMBED}")
    for name in ("rflaky", "rwhole", "remb"):
        cell(ip, f"%ms_serve {name} --engine ray")
    key = json.loads(ray_engine.key_file.read_text())["inference"]["key"]
    client = openai_client(ray_engine.openai_base_url, key)
    listed = {m.id for m in client.models.list()}  # the models that stream or embed; rapi when served before
    assert {"rflaky", "remb"} <= listed and "rwhole" not in listed
    texts = ["the cat", "a dog sat"]
    got = client.embeddings.create(model="remb", input=texts)
    with capture_output():
        predicted = ip.run_line_magic("ms_predict", "remb --data '\"the cat\"'")
    assert got.data[0].embedding == pytest.approx(predicted, rel=1e-5, abs=1e-6)
    for text, item in zip(texts, got.data, strict=True):
        assert item.embedding == pytest.approx(embedding(text), rel=1e-5, abs=1e-6)
    with pytest.raises(openai.BadRequestError, match="Hint: add --embeddings"):
        client.embeddings.create(model="rwhole", input="x")
    walker = Walker(
        ray_engine.openai_base_url.removesuffix("/v1"), key, {"streams": "rflaky", "whole": "rwhole", "fails": "rflaky"}
    )
    assert walker.walk() == []
