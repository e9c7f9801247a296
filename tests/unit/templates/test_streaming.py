"""Streaming answers: the `inference` role, generator roles' chunks per request, their wire format and failures,
run by msnb.test_handler in a test process as a TorchServe worker runs them (intermediate responses)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from charlm import HANDLER_BODY, MODEL_SOURCE, char_lm, greedy
from helpers import MLP_SOURCE, mlp_model

import msnb
from msnb.capture.cells import capture
from msnb.engines.chunks import ChunkReader
from msnb.errors import CaptureError, HandlerRunError
from msnb.spec import spec_from_source
from msnb.trial import processes

# The cell, with its weights seeded in init_function (no checkpoint in this tier).
SEEDED = HANDLER_BODY.replace("    return CharLM(", "    torch.manual_seed(0)\n    return CharLM(")
LM = MODEL_SOURCE + SEEDED


@pytest.fixture(autouse=True)
def no_test_process_left():
    yield
    processes.close()


def seeded_lm() -> torch.nn.Module:
    torch.manual_seed(0)
    return char_lm()(29).eval()


def run(cell: str, **config):
    return capture("m", textwrap.dedent(cell), [], **config)


# ---------------------------------------------------------------- the role, at capture
@pytest.mark.parametrize(
    "definition",
    ["def inference(model):\n    return model\n", "async def inference(model, batch):\n    return model(batch)\n"],
)
def test_inference_with_the_wrong_arity_or_async_is_refused_with_the_signature(definition):
    with pytest.raises(CaptureError, match="role inference") as err:
        run("def init_function():\n    return 1\n" + definition)
    assert "def inference(model, batch)" in err.value.hint


@pytest.mark.parametrize("name", ["forward", "predict", "infer"])
def test_other_frameworks_names_for_the_step_get_did_you_mean_inference(name):
    spec = run(f"def init_function():\n    return 1\ndef {name}(model, batch):\n    return model(batch)\n")
    assert [(m.name, m.role) for m in spec.near_misses] == [(name, "inference")]
    assert "did you mean `inference`?" in spec.near_misses[0].warning()


def test_a_plain_inference_role_replaces_the_forward_and_its_output_is_split_per_sample():
    cell = MLP_SOURCE + "\ndef inference(model, batch):\n    return model(batch) * 2\n"
    spec = spec_from_source("twice", cell, init_kwargs={"hidden": 8}, batch_size=2)
    xs = [[0.5, -1.0, 2.0, 0.1], [1.0, 2.0, 3.0, 4.0]]
    answers = msnb.test_handler(spec, [{"x": x} for x in xs])
    with torch.no_grad():
        truth = mlp_model()(torch.tensor(xs)) * 2
    assert [a["label"] for a in answers] == truth.argmax(1).tolist()
    torch.testing.assert_close(torch.tensor([a["scores"] for a in answers]), truth, atol=1e-4, rtol=0)


# ---------------------------------------------------------------- generators stream
def test_a_generator_inference_streams_the_notebooks_own_greedy_generation_chunk_by_chunk():
    [chunks] = msnb.test_handler(spec_from_source("gen", LM), ["the cat"])
    assert chunks == greedy(seeded_lm(), "the cat")


def test_in_one_batch_each_request_streams_its_own_prompt_even_when_lengths_differ():
    prompts = ["the cat", "a dog sat", "the mat"]  # two lengths: one generator per sample that cannot be stacked
    answers = msnb.test_handler(spec_from_source("gen2", LM, batch_size=3), prompts)
    assert answers == [greedy(seeded_lm(), p) for p in prompts]


def test_a_generator_postprocess_streams_json_lines_per_request():
    cell = MLP_SOURCE.replace("def postprocess(output):", "def _unused(output):") + textwrap.dedent(
        """
        def postprocess(output):
            for i, score in enumerate(output.tolist()):
                yield {"class": i, "score": round(score, 4)}
        """
    )
    xs = [[0.5, -1.0, 2.0, 0.1], [1.0, 2.0, 3.0, 4.0]]
    answers = msnb.test_handler(
        spec_from_source("pp", cell, init_kwargs={"hidden": 8}, batch_size=2), [{"x": x} for x in xs]
    )
    with torch.no_grad():
        truth = mlp_model()(torch.tensor(xs))
    assert [[c["score"] for c in a] for a in answers] == [[round(v, 4) for v in row] for row in truth.tolist()]
    assert [[c["class"] for c in a] for a in answers] == [[0, 1, 2], [0, 1, 2]]


# ---------------------------------------------------------------- failures mid-stream
FAILS_AFTER_3 = MODEL_SOURCE + SEEDED.replace(
    "        yield nxt[:, 0]",
    "        yield nxt[:, 0]\n        if ids.shape[1] >= batch.shape[1] + 3:\n            raise ValueError('step 4 broke')",
)


def test_a_generator_that_raises_after_3_chunks_delivers_them_then_an_error_and_the_worker_keeps_serving():
    spec = spec_from_source("fails", FAILS_AFTER_3)
    with pytest.raises(HandlerRunError) as err:
        msnb.test_handler(spec, ["the cat"])
    assert "inference failed: ValueError: step 4 broke" in err.value.message
    assert "after 3 chunks" in err.value.message
    from msnb.trial import runner

    [answer] = runner.run_handler(spec, ["the cat"])
    assert answer.chunks == tuple(greedy(seeded_lm(), "the cat")[:3])
    assert answer.body["stage"] == "inference" and answer.status == 500
    assert runner.run_handler(spec_from_source("gen", LM), ["a dog"])[0].body == greedy(seeded_lm(), "a dog")


def test_a_chunk_json_cannot_carry_ends_the_stream_with_its_type_and_the_fix():
    cell = LM.replace("    return CHARS[int(step)]", "    return {'char': CHARS[int(step)], 'when': object()}")
    from msnb.trial import runner

    [answer] = runner.run_handler(spec_from_source("obj", cell), ["the cat"])
    assert answer.status == 500 and not answer.chunks  # it failed before its first chunk: an ordinary error
    assert "chunk 0 holds a object (inside a dict), which JSON cannot carry" in answer.body["error"]
    assert "JSON-serialisable" in answer.body["hint"] and "instead of a object" in answer.body["hint"]


def test_a_tensor_chunk_goes_out_as_json_like_a_tensor_answer():
    cell = LM.replace("    return CHARS[int(step)]", "    return step")
    [chunks] = msnb.test_handler(spec_from_source("tensor", cell), ["the cat"])
    assert [CHARS_OF(c) for c in chunks] == greedy(seeded_lm(), "the cat")


def CHARS_OF(index: int) -> str:  # reads as the table it indexes
    from charlm import CHARS

    return CHARS[index]


# ---------------------------------------------------------------- how a client cuts a stream
def test_a_json_lines_body_is_cut_into_its_values_however_its_bytes_arrive_and_ends_at_the_error_line():
    body = b'{"a": 1}\n[2, 3]\n"x"\n{"error": "inference failed: E", "hint": "h", "stage": "inference", "type": "E"}\n'
    reader = ChunkReader("application/jsonl")
    chunks = [c for i in range(0, len(body), 5) for c in reader.feed(body[i : i + 5])] + reader.close()
    assert chunks == [{"a": 1}, [2, 3], "x"] and reader.error["stage"] == "inference"


def test_text_pieces_keep_multibyte_characters_whole_and_lose_the_error_line():
    reader = ChunkReader("text/plain; charset=utf-8")
    text = "héllo".encode()
    pieces = (
        reader.feed(text[:2])
        + reader.feed(text[2:])
        + reader.feed(b'\n{"error": "e", "hint": "h", "stage": "postprocess", "type": "T"}\n')
    )
    assert "".join(pieces) == "héllo" and reader.error["stage"] == "postprocess"
