"""Streamed answers on a real TorchServe: a generator handler's chunks arrive one by one over chunked HTTP, each
request of a batch its own, through the shared handler and the notebook's dev entry; failures and disconnects
mid-stream end only their own stream. The truth is greedy generation in plain torch."""

from __future__ import annotations

import threading

import pytest
import torch
from charlm import HANDLER_BODY, MODEL_SOURCE, char_lm, greedy
from helpers import MLP_SOURCE, mlp_model

from msnb.engines.torchserve.config import FRONTEND_LOG
from msnb.errors import ServerError
from msnb.session.deployment import deploy
from msnb.session.reload import install
from msnb.spec import spec_from_source

SEEDED = HANDLER_BODY.replace("    return CharLM(", "    torch.manual_seed(0)\n    return CharLM(")
LM = MODEL_SOURCE + SEEDED
FAILS_AFTER_3 = MODEL_SOURCE + SEEDED.replace(
    "        yield nxt[:, 0]",
    "        yield nxt[:, 0]\n        if ids.shape[1] >= batch.shape[1] + 3:\n            raise ValueError('step 4 broke')",
)
JSON_LINES = MLP_SOURCE.replace("def postprocess(output):", "def _unused(output):") + (
    "\ndef postprocess(output):\n    for i, score in enumerate(output.tolist()):\n        yield {'class': i, 'score': score}\n"
)


def seeded_lm() -> torch.nn.Module:
    torch.manual_seed(0)
    return char_lm()(29).eval()


def raw_pieces(server, name: str, prompt: str) -> tuple[str, list[bytes]]:
    """The answer's Content-Type and its body as the pieces that arrived one read at a time."""
    url = f"{server.inference_url}/predictions/{name}"
    resp = server.client.call(
        "POST", url, "inference", data=prompt.encode(), headers={"Content-Type": "text/plain"}, stream=True
    )
    with resp:
        assert resp.status_code == 200, resp.text
        return resp.headers.get("Content-Type", ""), list(resp.iter_content(None))


@pytest.mark.parametrize("entry", ["shared handler", "dev entry"])
def test_the_streamed_text_is_the_notebooks_greedy_generation_and_arrives_in_pieces(clean_server, entry):
    prepare = install if entry == "dev entry" else None
    deploy(clean_server, spec_from_source("gen", LM), prepare=prepare)
    ctype, pieces = raw_pieces(clean_server, "gen", "the cat")
    truth = greedy(seeded_lm(), "the cat")
    assert ctype.startswith("text/plain") and b"".join(pieces).decode() == "".join(truth)
    assert len(pieces) > 1  # the first chunk came before the whole answer: one read would hold it all otherwise
    assert list(clean_server.predict_stream("gen", "a dog")) == greedy(seeded_lm(), "a dog")
    frontend_log = (clean_server.log_dir / FRONTEND_LOG).read_text()
    assert "Sending response for jobId" not in frontend_log  # not one line (one write) per chunk in the frontend's log


def test_two_concurrent_streams_in_one_batch_each_get_their_own_prompts_generation(clean_server):
    deploy(clean_server, spec_from_source("gen2", LM, batch_size=2, max_batch_delay=3000))
    prompts, got = ["the cat", "a dog sat"], {}
    threads = [
        threading.Thread(target=lambda p=p: got.update({p: list(clean_server.predict_stream("gen2", p))}))
        for p in prompts
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == {p: greedy(seeded_lm(), p) for p in prompts}


def test_a_generator_postprocess_streams_json_lines(clean_server):
    deploy(clean_server, spec_from_source("lines", JSON_LINES, init_kwargs={"hidden": 8}))
    x = [0.5, -1.0, 2.0, 0.1]
    chunks = list(clean_server.predict_stream("lines", {"x": x}))
    with torch.no_grad():
        truth = mlp_model()(torch.tensor([x]))[0].tolist()
    assert [c["class"] for c in chunks] == [0, 1, 2]
    torch.testing.assert_close(torch.tensor([c["score"] for c in chunks]), torch.tensor(truth))


def test_an_error_mid_stream_keeps_the_chunks_sent_ends_with_the_error_and_the_worker_keeps_serving(clean_server):
    deploy(clean_server, spec_from_source("fails", FAILS_AFTER_3))
    got = []
    with pytest.raises(ServerError) as err:
        for chunk in clean_server.predict_stream("fails", "the cat"):
            got.append(chunk)
    assert got == greedy(seeded_lm(), "the cat")[:3]
    assert "stream ended with an error after 3 chunks" in err.value.message and "step 4 broke" in err.value.message
    assert err.value.hint and "notebook" in err.value.hint
    deploy(clean_server, spec_from_source("gen", LM))
    assert list(clean_server.predict_stream("gen", "the mat")) == greedy(seeded_lm(), "the mat")


def test_a_client_that_disconnects_mid_stream_leaves_the_other_streams_and_the_worker_serving(clean_server):
    deploy(clean_server, spec_from_source("gen", LM, batch_size=2, max_batch_delay=200))
    pid = clean_server.status("gen").workers[0].pid
    stream = clean_server.predict_stream("gen", "the cat")
    assert next(stream) == greedy(seeded_lm(), "the cat")[0]
    stream.close()  # the connection is closed with the answer half read
    answers = clean_server.predict_many("gen", ["a dog", "the mat"])
    assert answers == ["".join(greedy(seeded_lm(), p)) for p in ("a dog", "the mat")]
    assert clean_server.status("gen").workers[0].pid == pid
