"""Each answer's Content-Type: JSON for objects, text for str, sniffed bytes; a type the handler set is kept."""

from __future__ import annotations

import pytest
from ts.context import Context, RequestProcessor

from msnb.templates.msnb_runtime.handler.content_type import BYTES_TYPE, JSON_TYPE, TEXT_TYPE, content_type, label


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"label": 1}, JSON_TYPE),
        ([0.1, 0.9], JSON_TYPE),
        (None, JSON_TYPE),
        ("a caption", TEXT_TYPE),
        (b"\x89PNG\r\n\x1a\n....", "image/png"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", "audio/wav"),
        (b"\x00\x01raw", BYTES_TYPE),
    ],
)
def test_an_answer_gets_the_content_type_of_what_it_is(answer, expected):
    assert content_type(answer) == expected


def test_labelling_keeps_a_type_the_users_handler_set_and_fills_in_the_rest():
    context = Context("m", "/nowhere", {"model": {}}, 1, None, "0.12.0")
    context.request_processor = [RequestProcessor({}) for _ in range(3)]
    context.set_response_content_type(0, "image/x-portable-graymap")
    label(context, [b"P5 1 1 255\n\x00", {"n": 1}, b"\xff\xd8\xff\xe0"])
    types = [context.get_response_content_type(i) for i in range(3)]
    assert types == ["image/x-portable-graymap", JSON_TYPE, "image/jpeg"]
