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


def test_numbers_agree_within_rtol_and_atol_and_anything_else_still_differs():
    close = (1e-3, 1e-6)  # (rtol, atol): |a - b| <= atol + rtol * |b|
    assert first_difference({"p": [0.5000004, 2.0]}, {"p": [0.5, 2.001]}, tolerance=close) is None
    assert first_difference({"p": [0.5, 2.0]}, {"p": [0.5, 2.01]}, tolerance=close) == "$.p[1]: 2.0 != 2.01"
    assert first_difference(1, 1.0, tolerance=close) is None  # numbers, compared as numbers
    assert first_difference({"label": "cat"}, {"label": "dog"}, tolerance=close) == '$.label: "cat" != "dog"'
    assert first_difference(True, 1, tolerance=close) == "$: true != 1"  # a boolean is no number
    assert difference(Request("m"), Answer(200, b"[0.1]"), Answer(200, b"[0.10001]"), (1e-3, 0)) is None
    assert difference(Request("m"), Answer(200, b"[0.1]"), Answer(200, b"[0.10001]")) == "$[0]: 0.1 != 0.10001"


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


def _row(line: int, ts: bytes, ray: bytes, status: int = 503) -> tuple:
    request, left, right = Request("m", line=line), Answer(status, ts), Answer(status, ray)
    return request, left, right, difference(request, left, right)


FAILED_TS = b'{"code": 503, "type": "InternalServerException", "message": "Prediction failed"}'
FAILED_RAY = b'{"code": 503, "type": "InternalServerException", "message": "Prediction failed: ValueError: no x"}'


def test_an_error_message_carrying_the_exception_on_ray_is_documented_and_passes_unless_strict():
    from msnb.engines.compare import ERROR_MESSAGE, documented, undocumented

    known = _row(1, FAILED_TS, FAILED_RAY)
    assert documented(*known[:3]) is ERROR_MESSAGE
    assert table([known]).splitlines()[1].split()[5:7] == ["documented:", "an"]
    other_type = _row(2, FAILED_TS, FAILED_RAY.replace(b"InternalServerException", b"Other"))
    other_text = _row(3, FAILED_TS, FAILED_RAY.replace(b"Prediction failed:", b"Load failed:"))
    ok_answers = _row(4, b'{"message": "a"}', b'{"message": "a: b"}', status=200)
    assert [documented(*row[:3]) for row in (other_type, other_text, ok_answers)] == [None, None, None]
    rows = [known, other_type, other_text, ok_answers, _row(5, b"1", b"1", status=200)]
    assert undocumented(rows) == [other_type, other_text, ok_answers]
    assert undocumented(rows, strict=True) == rows[:4]


def test_the_ci_files_say_each_request_equal_documented_or_differing():
    from xml.etree import ElementTree

    from msnb.engines.compare_report import as_json, junit_xml

    rows = [_row(1, b"1", b"1", status=200), _row(2, FAILED_TS, FAILED_RAY), _row(3, b"1", b"2", status=200)]
    result = as_json(rows, ["other"], strict=False)
    assert (result["ok"], result["equal"], result["documented"], result["differs"]) == (False, 1, 1, 1)
    assert [r["outcome"] for r in result["requests"]] == ["equal", "documented", "differs"]
    assert result["not_served"] == ["other"] and result["requests"][2]["detail"] == "$: 1 != 2"
    suites = ElementTree.fromstring(junit_xml(rows, ["other"], strict=False))
    model = suites.find("testsuite[@name='m']")
    assert (model.get("tests"), model.get("failures")) == ("3", "1")
    cases = model.findall("testcase")
    assert "documented difference: an error answer" in cases[1].find("system-out").text
    assert cases[2].find("failure").get("message") == "$: 1 != 2"
    assert suites.find("testsuite[@name='other']/testcase/failure") is not None
    strict = ElementTree.fromstring(junit_xml(rows[:2], [], strict=True))
    assert strict.find("testsuite").get("failures") == "1" and as_json(rows[:2], [], strict=True)["ok"] is False
    assert as_json(rows[:2], [], strict=False)["ok"] is True
