"""A served model through OpenAI's official client and MCP's official client on a real TorchServe (msnb's front on
loopback): chat and completions, streamed and whole, equal the notebook's greedy generation in plain torch; max_tokens,
stop, the models list, a wrong key, refused fields; two streams in one batch; a client that leaves mid-stream; a
stream ended early stops its generator in the worker."""

from __future__ import annotations

import json
import time

import openai
import pytest
import requests
import torch
from api_clients import concurrently, failure_text, mcp_tools, openai_client, streamed_response, streamed_text
from api_errors import EMBED, FLAKY, Walker, embedding
from charlm import API_BODY, API_DOC, MODEL_SOURCE, greedy, seeded_char_lm
from helpers import MLP_SOURCE, mlp_model, processes_naming

from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source

PROMPTS = ("the cat", "a dog sat")
LM = API_BODY.replace('"""\n', '"""\n' + MODEL_SOURCE, 1)  # one module: the docstring first, the model, the roles
# The counter runs on for COUNT_S unless it is closed: far longer than a test waits for its end (a count of steps was
# not: a loaded machine's worker ran 200,000 of them before the front, starved of CPU, read its third chunk).
COUNT_S = 300
COUNTER = f"""
import time
from pathlib import Path

import torch

WHERE = [None]

def init_function():
    return torch.nn.Identity()

def preprocess(request):
    WHERE[0] = Path(request["progress"])  # where the generator writes how it ended
    return torch.tensor(0)

def inference(model, batch):
    step, end = 0, time.monotonic() + {COUNT_S}
    try:
        while time.monotonic() < end:
            yield batch + step
            step += 1
    finally:
        WHERE[0].write_text("ran to its end" if time.monotonic() >= end else "closed")

def postprocess(step):
    return f" {{int(step)}}"
"""


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    """One TorchServe with the streaming LM (batch size 2) and a model that answers whole, and its key."""
    srv = LocalServer(tmp_path_factory.mktemp("api-server"))
    with srv:
        deploy(srv, spec_from_source("gen", LM, batch_size=2, max_batch_delay=300, example={"prompt": "the cat"}))
        deploy(srv, spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, example={"x": [0.0] * 4}))
        deploy(srv, spec_from_source("count", COUNTER))
        deploy(srv, spec_from_source("flaky", FLAKY, example={"prompt": "x"}))
        deploy(srv, spec_from_source("emb", EMBED, batch_size=4, max_batch_delay=50, embeddings=True))
        key = json.loads(srv.key_file.read_text())["inference"]["key"]
        yield srv, key
        url = srv.openai_base_url
    assert not processes_naming(srv.workdir) and srv.openai_base_url == ""
    with pytest.raises(requests.ConnectionError):  # the front stopped with the server
        requests.get(f"{url}/models", timeout=5)


def truth(prompt: str) -> str:
    return "".join(greedy(seeded_char_lm(), prompt))


def test_the_openai_client_gets_the_notebooks_generation_whole_streamed_and_as_a_completion(api_server):
    server, key = api_server
    client = openai_client(server.openai_base_url, key)
    assert server.openai_base_url.startswith("http://127.0.0.1:") and server.openai_base_url.endswith("/v1")
    whole = client.chat.completions.create(model="gen", messages=[{"role": "user", "content": "the cat"}])
    assert whole.choices[0].message.content == truth("the cat") and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens == len(truth("the cat"))  # one piece per character
    pieces, finish = streamed_text(client, "gen", "the cat")
    assert "".join(pieces) == truth("the cat") and len(pieces) > 1 and finish == "stop"
    text = client.completions.create(model="gen", prompt="a dog sat")
    assert text.choices[0].text == truth("a dog sat")
    short, finish = streamed_text(client, "gen", "the cat", max_tokens=5)
    assert "".join(short) == truth("the cat")[:5] and finish == "length"
    cut = client.completions.create(model="gen", prompt="the cat", stop=[truth("the cat")[6:8]])
    assert cut.choices[0].text == truth("the cat")[:6] and cut.choices[0].finish_reason == "stop"
    assert [m.id for m in client.models.list()] == ["count", "emb", "flaky", "gen"]  # those that stream or embed


def test_the_responses_api_answers_the_notebooks_generation_whole_streamed_and_cut_by_max_output_tokens(api_server):
    server, key = api_server
    client = openai_client(server.openai_base_url, key)
    whole = client.responses.create(model="gen", input="the cat", instructions="continue the text")
    assert whole.output_text == truth("the cat") and whole.status == "completed"
    assert whole.usage.output_tokens == len(truth("the cat")) and whole.instructions == "continue the text"
    deltas, kinds, final = streamed_response(client, "gen", [{"role": "user", "content": "a dog sat"}])
    assert "".join(deltas) == truth("a dog sat") == final.output_text and len(deltas) > 1
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    deltas, kinds, final = streamed_response(client, "gen", "the cat", max_output_tokens=5)
    assert "".join(deltas) == truth("the cat")[:5] and kinds[-1] == "response.incomplete"
    assert final.incomplete_details.reason == "max_output_tokens" and final.usage.output_tokens == 5
    with pytest.raises(openai.BadRequestError, match="Hint: leave `previous_response_id` out") as err:
        client.responses.create(model="gen", input="x", previous_response_id=whole.id)
    assert err.value.param == "previous_response_id"
    with pytest.raises(openai.BadRequestError, match="does not stream"):
        client.responses.create(model="mlp", input="x")


def test_a_wrong_key_is_401_and_what_msnb_cannot_honour_is_a_400_naming_it(api_server):
    server, key = api_server
    with pytest.raises(openai.AuthenticationError):
        openai_client(server.openai_base_url, "not-the-key").models.list()
    client = openai_client(server.openai_base_url, key)
    with pytest.raises(openai.BadRequestError, match="does not stream") as err:
        client.chat.completions.create(model="mlp", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="gen", messages=[{"role": "user", "content": "x"}], n=2)
    assert err.value.param == "n"
    with pytest.raises(openai.NotFoundError, match="gen"):
        client.completions.create(model="nope", prompt="x")


@pytest.mark.parametrize("mode", ["initialize", "discover"])
def test_mcp_tools_are_the_served_models_and_a_call_answers_as_predict_does(api_server, mode):
    server, key = api_server
    x = [0.5, -1.0, 2.0, 0.1]
    calls = [("gen", {"prompt": "the cat"}), ("mlp", {"x": x}), ("flaky", {"prompt": "x"})]
    tools, (gen, mlp, flaky) = mcp_tools(server.mcp_url, key, calls, mode)
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"count", "emb", "flaky", "gen", "mlp"} and by_name["gen"].description == API_DOC
    assert by_name["gen"].input_schema["properties"] == {"prompt": {"type": "string"}}
    assert by_name["gen"].output_schema["required"] == ["result"] and by_name["mlp"].output_schema is None
    assert (
        gen.structured_content
        == {"result": truth("the cat")}
        == {"result": server.predict("gen", {"prompt": "the cat"})}
    )
    assert gen.content[0].text == truth("the cat") and not gen.is_error
    with torch.no_grad():
        label = int(mlp_model()(torch.tensor([x]))[0].argmax())
    assert mlp.structured_content == server.predict("mlp", {"x": x}) and mlp.structured_content["label"] == label
    assert flaky.is_error and "the generator broke" in flaky.content[0].text and "Hint:" in flaky.content[0].text


def test_without_the_key_the_mcp_client_shows_msnbs_hint(api_server):
    server, _ = api_server
    for mode in ("initialize", "discover"):
        said = failure_text(lambda mode=mode: mcp_tools(server.mcp_url, "wrong", [], mode))
        assert "Hint: the API key is the server's inference key" in said, mode


def test_two_streams_share_a_batch_and_a_client_that_leaves_does_not_stop_the_others(api_server):
    server, key = api_server
    client = openai_client(server.openai_base_url, key)
    got = concurrently({p: (lambda p=p: "".join(streamed_text(client, "gen", p)[0])) for p in PROMPTS})
    assert got == {p: truth(p) for p in PROMPTS}
    leaving = client.chat.completions.create(
        model="gen", messages=[{"role": "user", "content": "the cat"}], stream=True
    )
    next(iter(leaving))
    leaving.close()  # the client leaves after its first chunk
    assert "".join(streamed_text(client, "gen", "a dog sat")[0]) == truth("a dog sat")


def test_a_stream_ended_early_stops_its_generator_in_the_worker(api_server, tmp_path):
    server, key = api_server
    client = openai_client(server.openai_base_url, key)
    for how, progress in (("max_tokens", tmp_path / "short"), ("the client leaves", tmp_path / "left")):
        stream = client.chat.completions.create(
            model="count",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            max_tokens=3 if how == "max_tokens" else None,
            extra_body={"progress": str(progress)},
        )
        pieces = [c.choices[0].delta.content for c, _ in zip(stream, range(4)) if c.choices[0].delta.content]
        stream.close()
        assert pieces == [f" {i}" for i in range(len(pieces))] and len(pieces) >= 3
        deadline = time.monotonic() + 60  # the generator's finally writes how it ended (its own end: COUNT_S away)
        while not (progress.exists() and progress.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert progress.exists() and progress.read_text() == "closed", how


def test_every_error_of_the_table_is_answered_as_it_says(api_server):
    server, key = api_server
    walker = Walker(
        server.openai_base_url.removesuffix("/v1"), key, {"streams": "gen", "whole": "mlp", "fails": "flaky"}
    )
    assert walker.walk() == []


def test_embeddings_are_what_predict_answers_for_each_input_as_floats_and_as_base64(api_server):
    server, key = api_server
    client = openai_client(server.openai_base_url, key)
    texts = ["the cat", "a dog sat", "x"]
    listed = {m.id for m in client.models.list()}
    assert "emb" in listed and "mlp" not in listed  # the embedding model is listed, the one that only predicts not
    got = client.embeddings.create(model="emb", input=texts)  # the client asks for base64 and decodes it
    assert [d.index for d in got.data] == [0, 1, 2] and got.model == "emb"
    for text, item in zip(texts, got.data, strict=True):
        assert item.embedding == pytest.approx(embedding(text), rel=1e-5, abs=1e-6) == server.predict("emb", text)
    floats = client.embeddings.create(model="emb", input="the cat", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(embedding("the cat"), rel=1e-5, abs=1e-6)
    with pytest.raises(openai.BadRequestError, match="Hint: add --embeddings"):
        client.embeddings.create(model="mlp", input="x")
    with pytest.raises(openai.BadRequestError, match="Hint: token arrays"):
        client.embeddings.create(model="emb", input=[[1, 2, 3]])
