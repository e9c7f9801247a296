"""A model folder's API card: the MCP tool's description from the handler's docstring, its input schema from
--example or --schema FILE (a sample that is not an object becomes the one argument ``input``), whether it streams."""

from __future__ import annotations

import json

import pytest
from charlm import HANDLER_BODY, MODEL_SOURCE

from msnb.capture.named_files import refusal
from msnb.errors import OptionError
from msnb.options import handler_config, parse_handler_line
from msnb.package.api_card import card
from msnb.package.model_folder import ModelFolder
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.names import API_CARD

DOC = '"""Continues a lowercase text, one character per step."""\n'


def test_a_streaming_cells_card_has_its_docstring_a_wrapped_string_input_and_says_it_streams(tmp_path):
    spec = spec_from_source("gen", DOC + MODEL_SOURCE + HANDLER_BODY, example="the cat")
    ModelFolder.stage(spec, tmp_path)
    got = json.loads((tmp_path / API_CARD).read_text())
    assert got["description"] == "Continues a lowercase text, one character per step." and got["streams"]
    assert got["wrapped"] and got["input_schema"]["properties"] == {"input": {"type": "string"}}


def test_an_object_example_is_the_schema_and_a_roles_docstring_describes_it():
    source = MODEL_SOURCE + HANDLER_BODY.replace(
        "def preprocess(prompt):", 'def preprocess(prompt):\n    """Reads x."""'
    )
    got = card(spec_from_source("m", source, example={"x": [1.5, 2.0], "name": "a"}))
    assert got["description"] == "Reads x." and not got["wrapped"]
    assert got["input_schema"] == {
        "type": "object",
        "required": ["x", "name"],
        "properties": {"x": {"type": "array", "items": {"type": "number"}}, "name": {"type": "string"}},
    }


def test_schema_file_is_the_input_schema_and_a_bad_one_is_refused_with_a_hint(tmp_path):
    (tmp_path / "s.json").write_text('{"type": "object", "properties": {"q": {"type": "string"}}}')
    config = handler_config(parse_handler_line("m --schema s.json"), base_dir=tmp_path)
    got = card(spec_from_source("m", MODEL_SOURCE + HANDLER_BODY, input_schema=config["input_schema"]))
    assert got["input_schema"]["properties"] == {"q": {"type": "string"}} and not got["wrapped"]
    (tmp_path / "bad.json").write_text("[1]")
    for name in ("bad.json", "missing.json"):
        with pytest.raises(OptionError, match="--schema") as err:
            handler_config(parse_handler_line(f"m --schema {name}"), base_dir=tmp_path)
        assert err.value.hint


def test_export_refuses_a_schema_file_outside_the_notebooks_folder(tmp_path):
    (tmp_path / "outside.json").write_text('{"type": "object"}')
    (tmp_path / "nb").mkdir()
    spec = spec_from_source("m", MODEL_SOURCE + HANDLER_BODY)
    err = refusal(spec, f"m --schema {tmp_path / 'outside.json'}", tmp_path / "nb" / "nb.ipynb")
    assert err is not None and "--schema" in str(err) and "outside the notebook's folder" in str(err)


def test_the_embeddings_flag_reaches_the_card_and_the_capture_summary():
    config = handler_config(parse_handler_line("m --embeddings"))
    spec = spec_from_source("m", MODEL_SOURCE + HANDLER_BODY, embeddings=config["embeddings"])
    assert card(spec)["embeds"] and not card(spec_from_source("m", MODEL_SOURCE + HANDLER_BODY))["embeds"]
    assert "embeddings" not in handler_config(parse_handler_line("m"))
    from msnb.ui.display import SpecSummary

    assert "POST /v1/embeddings" in SpecSummary(spec).text()
