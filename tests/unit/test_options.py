"""The `%%ms_handler` option line: how --requirements values resolve (kernel variables, files, pip names)."""

from __future__ import annotations

import json

import numpy
import pytest

from msnb.errors import OptionError, SpecError
from msnb.options import handler_config, option_value, parse_handler_line


def requirements(value: str, namespace=None, base=None) -> tuple[str, ...]:
    args = parse_handler_line(f"m --requirements {value}")
    return handler_config(args, namespace, base)["requirements"]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("numpy", ("numpy",)),
        ("numpy,scipy", ("numpy", "scipy")),
        ('"numpy, scipy"', ("numpy", "scipy")),  # quoted: the quotes are not part of the names
        ("'numpy==1.26.4,scipy>=1.10,<2'", ("numpy==1.26.4", "scipy>=1.10,<2")),  # a comma inside a specifier stays
    ],
)
def test_pip_names_on_the_line(value, expected):
    assert requirements(value) == expected


def test_a_variable_holding_a_list_or_text(tmp_path):
    assert requirements("reqs", {"reqs": ["numpy==1.26.4", " tqdm "]}) == ("numpy==1.26.4", "tqdm")
    assert requirements("reqs", {"reqs": "transformers"}) == ("transformers",)  # one name, not its letters
    assert requirements("reqs", {"reqs": "numpy\n# a comment\nscipy>=1,<2\n"}) == ("numpy", "scipy>=1,<2")


def test_a_name_bound_to_a_module_is_a_pip_name():
    assert requirements("numpy", {"numpy": numpy}) == ("numpy",)


def test_a_list_of_non_strings_is_refused():
    with pytest.raises(SpecError, match=r"--requirements reqs: the list holds int, str[\s\S]*Hint:"):
        requirements("reqs", {"reqs": ["numpy", 3]})


def test_a_requirements_file_resolves_against_the_base_folder(tmp_path):
    (tmp_path / "requirements.txt").write_text("# pinned\nnumpy==1.26.4\n\nscipy\n")
    assert requirements("requirements.txt", base=tmp_path) == ("numpy==1.26.4", "scipy")
    with pytest.raises(SpecError, match=r"missing\.txt' does not exist"):
        requirements('"missing.txt"', base=tmp_path)


def test_example_and_init_kwargs_json_round_trip():
    args = parse_handler_line("""m --init-kwargs '{"hidden": 8}' --example '{"x": [1, 2]}'""")
    config = handler_config(args)
    assert config["init_kwargs"] == {"hidden": 8} and json.dumps(config["example"]) == '{"x": [1, 2]}'


def test_a_field_typed_in_the_widget_reads_as_the_same_option_on_the_magic_line(tmp_path):
    """The widget's fields go through the %%ms_handler line's parser: one parser, one set of messages."""
    line = handler_config(parse_handler_line("m --batch-size 8 --requirements numpy,scipy"), {}, tmp_path)
    assert option_value("batch_size", " 8 ", tmp_path) == line["batch_size"] == 8
    assert option_value("requirements", "numpy\nscipy\n", tmp_path) == line["requirements"] == ("numpy", "scipy")
    assert option_value("max_gpu_memory", "", tmp_path) is None
    with pytest.raises(
        OptionError, match=r"--batch-size takes a whole number, got 'two'[\s\S]*Hint: type a number >= 1"
    ):
        option_value("batch_size", "two", tmp_path)
    with pytest.raises(OptionError, match=r"--workers must be >= 1, got 0"):
        option_value("workers", "0", tmp_path)
    with pytest.raises(SpecError, match=r"--checkpoint: .*nope\.pt' does not exist[\s\S]*Hint: save it first"):
        option_value("checkpoint", "nope.pt", tmp_path)
