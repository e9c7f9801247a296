"""OpenAI's embeddings over a model's answers, with no server: the inputs a request holds, one embedding per answer
as floats or as OpenAI's base64 (little-endian float32, read back as the official client reads it), and what is
refused with a hint."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from msnb.templates.msnb_runtime.api import embeddings
from msnb.templates.msnb_runtime.api.openai import ApiError


def test_a_string_or_a_list_is_one_prediction_per_input_in_order():
    assert embeddings.parse({"model": "e", "input": "the cat"}).inputs == ("the cat",)
    request = embeddings.parse({"model": "e", "input": ["a", "b"], "encoding_format": "base64"})
    got = embeddings.reply(request, [[1.0, 2.5], [0, -1]])
    assert [d["index"] for d in got["data"]] == [0, 1] and got["model"] == "e"
    decoded = np.frombuffer(base64.b64decode(got["data"][1]["embedding"]), dtype="float32")  # as the client does
    assert decoded.tolist() == [0.0, -1.0]
    floats = embeddings.reply(embeddings.parse({"model": "e", "input": "a"}), [[1, 2]])
    assert floats["data"][0]["embedding"] == [1.0, 2.0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": []}, "input"),
        ({"input": [[1, 2]]}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 4}, "dimensions"),
        ({"input": ["a"] * 2049}, "input"),
    ],
)
def test_what_msnb_cannot_honour_is_a_400_naming_the_field(body, field):
    with pytest.raises(ApiError) as err:
        embeddings.parse({"model": "e", **body})
    assert err.value.status == 400 and err.value.param == field


def test_an_answer_that_is_no_list_of_numbers_is_a_500_with_a_hint_and_a_model_without_the_flag_a_400():
    for answer in ({"label": 1}, [], [[1.0]], ["a"], [True]):
        with pytest.raises(ApiError, match="Hint: make postprocess return one list of floats") as err:
            embeddings.vector(answer)
        assert err.value.status == 500
    assert "--embeddings" in embeddings.not_embedding("m").message
