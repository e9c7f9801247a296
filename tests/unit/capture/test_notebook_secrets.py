"""A notebook's credentials never ship: the handler cell, the definitions it pulls in, its runtime values (nested, str
and bytes in any encoding) and its options are scanned before anything is written; a finding is refused with where it
is, the detector and a hint that works; a false positive goes through only when named, and the summary says so."""

from __future__ import annotations

import textwrap

import pytest

from msnb.capture.cells import capture
from msnb.errors import CaptureError
from msnb.options import handler_config, parse_handler_line
from msnb.spec import Origin
from msnb.ui.display import SpecSummary

# Realistic fakes that detect-secrets' own detectors flag (split here so that this file holds none whole).
OPENAI_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" + "T3BlbkFJ" + "Ab3dEf6hIj9kLm2nOp5qR"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzQ8vT2hL5k"
AWS_KEY_ID = "AKIA" + "Z7VQ3M5KT2XW9PLR"
HANDLER = """\
import torch

OPENAI_API_KEY = "{key}"

def init_function():
    return torch.nn.Identity()
"""
USES = """\
import torch

def init_function():
    return torch.nn.Identity()

def postprocess(output):
    return {{"n": len({name})}}
"""


def cell(number: int) -> Origin:
    return Origin(f"cell In[{number}]", cell=number)


def run(handler: str, pool=(), options: str = "", namespace=None):
    config = handler_config(parse_handler_line(f"m {options}"), namespace or {})
    return capture("m", handler, list(pool), cell_origin=cell(5), namespace=namespace, **config)


def refusal(handler: str, pool=(), namespace=None) -> CaptureError:
    with pytest.raises(CaptureError) as caught:
        run(handler, pool, namespace=namespace)
    text = caught.value.render()
    assert "Hint:" in text
    for secret in (OPENAI_KEY, AWS_SECRET, AWS_KEY_ID):
        assert secret not in text  # masked: never the whole secret
    return caught.value


def test_a_key_in_the_handler_cell_is_refused_naming_its_line_the_detector_and_the_way_to_serve_it():
    err = refusal(HANDLER.format(key=OPENAI_KEY))
    assert "line 3 of cell In[5]: OpenAI Token (sk-p..., 68 characters)" in err.message
    assert "archive of 'm' would carry a secret" in err.message
    assert 'os.environ["OPENAI_API_KEY"]' in err.hint
    assert "`%ms_serve m --env OPENAI_API_KEY`" in err.hint and "msnb serve PATH --env OPENAI_API_KEY" in err.hint
    assert "--allow-secret OPENAI_API_KEY" in err.hint


def test_a_key_in_an_earlier_cell_the_handler_pulls_in_is_refused_naming_that_cell():
    pool = [(cell(3), f'import os\nAWS_SECRET_ACCESS_KEY = "{AWS_SECRET}"\n')]
    err = refusal(USES.format(name="AWS_SECRET_ACCESS_KEY"), pool)
    assert f"line 2 of cell In[3]: AWS Access Key ({AWS_SECRET[:4]}..., 40 characters)" in err.message
    assert "--env AWS_SECRET_ACCESS_KEY" in err.hint


def test_a_key_built_at_run_time_is_refused_by_its_name_and_where_it_is_used():
    pool = [(cell(2), 'aws_key_id = "".join(["AKIA", "Z7VQ3M5KT2XW9PLR"])\n')]
    err = refusal(USES.format(name="aws_key_id"), pool, {"aws_key_id": AWS_KEY_ID})
    assert "`aws_key_id` (a runtime value used on line 7 of cell In[5]): AWS Access Key (AKIA..." in err.message
    assert "--env AWS_KEY_ID" in err.hint


def test_a_key_inside_a_nested_container_is_refused_with_its_path():
    config = {"region": "eu-west-1", "aws": ("eu-west-1", AWS_KEY_ID), "retries": [1, 2]}
    pool = [(cell(2), "CONFIG = load_config()\n")]
    err = refusal(USES.format(name="CONFIG"), pool, {"CONFIG": config})
    assert "`CONFIG['aws'][1]` (a runtime value used on line 7 of cell In[5]): AWS Access Key" in err.message
    assert """--allow-secret "CONFIG['aws'][1]" """ in err.hint


def test_a_utf16_key_in_a_bytes_value_is_found_on_its_line():
    blob = f"[default]\naws_access_key_id = {AWS_KEY_ID}\n".encode("utf-16")
    err = refusal(USES.format(name="blob"), [(cell(2), "blob = open('creds', 'rb').read()\n")], {"blob": blob})
    assert "`blob`, line 2 of its text (a runtime value used on line 7 of cell In[5]): AWS Access Key" in err.message


def test_dict_keys_and_option_values_are_scanned_too():
    table = {AWS_KEY_ID: 1}
    err = refusal(USES.format(name="table"), [(cell(2), "table = build()\n")], {"table": table})
    assert (
        "`table['AKIA..., 20 characters']` (a runtime value used on line 7 of cell In[5]): AWS Access Key"
        in err.message
    )
    with pytest.raises(CaptureError, match=r"`--init-kwargs\['token'\]` \(the --init-kwargs option\)"):
        run(
            USES.format(name="'x'").replace("init_function()", "init_function(token)"),
            (),
            f'--init-kwargs \'{{"token": "{OPENAI_KEY}"}}\'',
        )


def test_plain_values_and_code_pass_without_a_finding():
    values = {"vocab": {"good": 1, "movie": 2}, "labels": ["negative", "positive"], "raw": b"\x00\x01binary"}
    pool = [(cell(2), "vocab = build()\nlabels = build()\nraw = build()\n")]
    spec = run(USES.format(name="vocab") + "\nLABELS = labels\nRAW = raw\n", pool, namespace=values)
    assert not [w for w in spec.warnings if "secret" in w]


def test_a_false_positive_goes_through_only_when_named_and_the_summary_lists_it():
    handler = HANDLER.format(key=OPENAI_KEY) + f'\nBACKUP_KEY = "{AWS_KEY_ID}"\n'
    with pytest.raises(CaptureError, match="AWS Access Key") as caught:  # naming one lets only that one through
        run(handler, options="--allow-secret OPENAI_API_KEY")
    assert "OpenAI" not in caught.value.message
    spec = run(handler, options="--allow-secret OPENAI_API_KEY In[5]:8")
    let_through = [w for w in spec.warnings if w.startswith("secret let through")]
    assert let_through == [
        "secret let through by --allow-secret OPENAI_API_KEY: line 3 of cell In[5]: OpenAI Token (sk-p..., 68 "
        "characters)",
        "secret let through by --allow-secret In[5]:8: line 8 of cell In[5]: AWS Access Key (AKIA..., 20 characters)",
    ]
    assert let_through[0] in SpecSummary(spec).text()


def test_a_value_is_let_through_by_its_name_or_its_path():
    config = {"aws": ("eu-west-1", AWS_KEY_ID)}
    pool = [(cell(2), "CONFIG = load_config()\n")]
    for token in ("CONFIG", "\"CONFIG['aws'][1]\""):
        spec = run(USES.format(name="CONFIG"), pool, f"--allow-secret {token}", {"CONFIG": config})
        assert any("`CONFIG['aws'][1]`" in w for w in spec.warnings if w.startswith("secret let through"))


def test_the_allow_option_is_declared_once_for_the_magic_and_export():
    help_text = textwrap.dedent(parse_handler_line.__doc__ or "")
    assert help_text  # the one parser (msnb.options) both use
    args = parse_handler_line("m --allow-secret A In[3]:2")
    assert handler_config(args)["allow_secrets"] == ("A", "In[3]:2")


def test_a_hugging_face_objects_json_files_are_scanned_and_its_weights_are_not():
    from msnb.capture.hf_objects import SavedObjects
    from msnb.capture.notebook_secrets import carried_of, check
    from msnb.capture.runtime_names import Needed

    config_json = f'{{\n  "model_max_length": 512,\n  "api_key": "{OPENAI_KEY}"\n}}\n'.encode()
    files = (("tok/tokenizer_config.json", config_json), ("tok/model.safetensors", b"\0\0" + OPENAI_KEY.encode()))
    config = {"objects": SavedObjects(files, ())}
    carried = carried_of(config, {"tok": Needed("tok", "line 3 of cell In[5]", "bound at runtime")}, {})
    assert list(carried.objects["tok"]) == ["hf_objects/tok/tokenizer_config.json"]  # weights are numbers
    with pytest.raises(CaptureError) as caught:
        check("m", (), carried)
    assert (
        "hf_objects/tok/tokenizer_config.json, line 3 (a Hugging Face object used on line 3 of cell In[5]): "
        "OpenAI Token" in caught.value.message
    )
    assert check("m", (), carried, ["tok"])[0].startswith("secret let through by --allow-secret tok: hf_objects/")


def test_numbers_and_tensors_are_values_without_text():
    import torch

    pool = [(cell(2), "n = count()\nmean = stats()\n")]
    spec = run(USES.format(name="[n, mean]"), pool, namespace={"n": 3, "mean": torch.zeros(2)})
    assert set(spec.values.names) == {"n", "mean"}
