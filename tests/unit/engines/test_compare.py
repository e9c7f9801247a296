"""`msnb compare`'s request file and its report of two answers: equal, or where they first differ."""

from __future__ import annotations

import pytest

from msnb.engines.compare import Answer, Request, difference, first_difference, parse_request, table
from msnb.errors import OptionError


def test_the_first_difference_names_its_place_in_the_json_or_its_byte():
    assert first_difference({"y": [3, 6], "n": 1}, {"y": [3, 6], "n": 1}) is None
    assert first_difference({"y": [3, 6]}, {"y": [3, 7]}) == "$.y[1]: 6 != 7"
    assert first_difference({"a": 1}, {"b": 1}) == '$.a: 1 != "<missing>"'
    assert first_difference(b"hello world", b"hello there") == "byte 6: b'world' != b'there'"
    assert first_difference(1, 1.0) == "$: 1 != 1.0"  # JSON 1 and 1.0 are told apart, as a client may


def test_a_status_differing_comes_first_and_describe_compares_what_both_engines_know():
    request = Request("m")
    assert difference(request, Answer(200, b"{}"), Answer(503, b"{}")) == "status 200 != 503"
    ts = b'[{"modelName": "m", "modelVersion": "1.0", "customizedMetadata": {}, "workers": [1]}]'
    ray = b'[{"modelName": "m", "modelVersion": "1.0", "customizedMetadata": {}, "runtime": "python"}]'
    assert difference(Request("m", "describe"), Answer(200, ts), Answer(200, ray)) is None
    rows = [(Request("m", line=1), Answer(200, b"1"), Answer(200, b"2"), "$: 1 != 2")]
    assert table(rows).splitlines()[1].split() == ["1:", "predictions", "m", "200", "200", "$:", "1", "!=", "2"]


def test_a_request_line_is_json_with_a_served_model_else_refused_naming_its_line(tmp_path):
    (tmp_path / "img.bin").write_bytes(b"\x89PNG")
    parsed = parse_request('{"body_file": "img.bin", "headers": {"content-type": "image/png"}}', 3, ["m"], tmp_path)
    assert (parsed.model, parsed.body, parsed.headers, parsed.line) == (
        "m",
        b"\x89PNG",
        {"content-type": "image/png"},
        3,
    )
    for bad in ("not json", '{"model": "other"}', '{"path": "metrics"}', "[1, 2]"):
        with pytest.raises(OptionError, match="request line 7") as err:
            parse_request(bad, 7, ["m", "n"], tmp_path)
        assert "one JSON object a line" in err.value.hint
