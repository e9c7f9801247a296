"""Requirements are PEP 508 requirements: pip options, paths, URLs and serving pins are refused before a build."""

from __future__ import annotations

import sys
import textwrap
import venv
from importlib import metadata

import pytest
from helpers import handler, run, standard

from msnb.capture import requirements as reqs
from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.capture.requirement_rules import check
from msnb.errors import SpecError
from msnb.options import handler_config, parse_handler_line
from msnb.package import server_packages

CELL = "import torch\n\ndef init_function():\n    return torch.nn.Linear(2, 1)\n"


def capture_with(tmp_path, requirements: str):
    config = handler_config(parse_handler_line(f"m --requirements {requirements}"), {}, tmp_path)
    return capture("m", CELL, [], search_path=search_path(tmp_path), **config)


@pytest.mark.parametrize(
    "given, kind, hint",
    [
        ("'--index-url http://x'", "pip options", "pip configuration"),
        ("'-r /etc/passwd'", "pip options", "pip configuration"),
        ("'-e git+https://example.org/pkg.git#egg=pkg'", "pip options", "pip configuration"),
        ("./local", "local paths", "importing it"),
        ("'pkg @ https://example.org/pkg-1.0.tar.gz'", "URLs", "importing it"),
        ("git+https://example.org/pkg.git", "URLs", "importing it"),
        ("torch==2.0.0", "torch, TorchServe", "serving image provides"),
        ("pillow==9.0.0", "torch, TorchServe", "serving image provides"),  # a dependency of TorchServe
        ("'numpy >> 2'", "not PEP 508", "one requirement per entry"),
    ],
)
def test_an_entry_that_is_not_a_requirement_is_refused_at_capture(tmp_path, given, kind, hint):
    with pytest.raises(SpecError) as err:
        capture_with(tmp_path, given)
    assert kind in err.value.message and hint in err.value.hint


def test_requirements_with_versions_markers_and_extras_pass(tmp_path):
    spec = capture_with(tmp_path, "'numpy==1.26.4, pandas>=2,<3, requests[socks]; python_version >= \"3.8\"'")
    assert spec.requirements[:3] == ("numpy==1.26.4", "pandas>=2,<3", 'requests[socks]; python_version >= "3.8"')


def test_a_long_file_with_bad_lines_is_summarised_not_echoed(tmp_path):
    lines = [f"-r /etc/secret{i}" for i in range(150)]
    (tmp_path / "reqs.txt").write_text("numpy==1.26.4\n" + "\n".join(lines) + "\n")
    with pytest.raises(SpecError) as err:
        capture_with(tmp_path, "reqs.txt")
    assert "and 147 more" in err.value.message and len(str(err.value)) < 600
    with pytest.raises(SpecError, match="'xxxxxxxx.*\\.\\.\\.'"):
        check(["x" * 200 + " @@"])  # one long entry is cut short too


def test_export_refuses_an_injected_index_and_builds_nothing(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("mlp", "--requirements '--extra-index-url http://evil.example/simple'"))
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code != 0 and "pip options" in err and "Hint:" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_inference_reads_installed_metadata_and_respects_markers():
    assert reqs.distributions_of("yaml")[0].name == "PyYAML"
    assert reqs.distributions_of("yaml")[0].version == metadata.version("PyYAML")
    serving = reqs.serving_distributions()
    assert {"torch", "torchserve", "torch-model-archiver", "psutil"} <= serving
    assert "enum34" not in serving, "torchserve requires enum34 only on Python < 3.4"
    pinned, warnings = reqs.pin({"yaml": "the handler, line 1"}, {}, ())
    assert pinned == (f"PyYAML=={metadata.version('PyYAML')}",) and not warnings


def test_given_entries_win_over_inferred_pins(tmp_path):
    cell = textwrap.dedent("""
        import yaml
        def init_function():
            return yaml
        """)
    config = handler_config(parse_handler_line("m --requirements 'PyYAML>=6'"), {}, tmp_path)
    spec = capture("m", cell, [], search_path=search_path(tmp_path), **config)
    assert spec.requirements == ("PyYAML>=6",)


def test_ten_thousand_valid_lines_are_over_the_cap_summarised_and_the_option_raises_it(tmp_path):
    (tmp_path / "reqs.txt").write_text("".join(f"pkg{i}==1.0\n" for i in range(10_000)))
    with pytest.raises(SpecError) as err:
        capture_with(tmp_path, "reqs.txt")
    assert "--requirements holds 10,000 entries, more than the 200 an archive may carry" in err.value.message
    assert "'pkg0==1.0', 'pkg1==1.0', 'pkg2==1.0' and 9997 more" in err.value.message and len(str(err.value)) < 600
    assert "--max-requirements N" in err.value.hint
    assert len(check([f"pkg{i}==1.0" for i in range(300)], 300)) == 300


def test_an_environment_variable_reference_is_refused_before_pip_could_expand_it():
    with pytest.raises(SpecError) as err:
        check(['numpy==1.26.4; platform_release == "${AWS_SECRET_ACCESS_KEY}"'])
    assert "environment-variable references" in err.value.message and "pip expands ${VAR}" in err.value.hint


def test_an_archive_with_requirements_asks_for_a_model_venv_that_sees_the_servers_packages(tmp_path):
    with_reqs = capture("m", "import captum\n" + CELL, [], search_path=search_path(tmp_path))
    assert with_reqs.requirements == (f"captum=={metadata.version('captum')}",)
    assert with_reqs.model_config()["useVenv"] is True, "TorchServe then installs only what the server lacks"
    assert "useVenv" not in capture("m", CELL, [], search_path=search_path(tmp_path)).model_config()


def test_only_the_requirements_the_serving_environment_lacks_are_installed():
    captum, numpy = f"captum=={metadata.version('captum')}", f"numpy>={metadata.version('numpy')}"
    lines = (captum, numpy, "six==0.0.1", "msnb-no-such-dist==1.0", "pandas; python_version < '3'")
    assert server_packages.missing(None, lines) == ("six==0.0.1", "msnb-no-such-dist==1.0")
    assert server_packages.missing(sys.executable, (captum,)) == ()


def test_a_server_interpreter_is_asked_for_its_versions_and_one_that_cannot_answer_lacks_everything(tmp_path):
    captum = f"captum=={metadata.version('captum')}"
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)  # no site-packages of ours: captum is missing there
    assert server_packages.missing(str(bare / "bin" / "python"), (captum, "six==0.0.1")) == (captum, "six==0.0.1")
    assert server_packages.missing(str(tmp_path / "no-python"), (captum,)) == (captum,)


def test_a_missing_import_inside_a_branch_is_said_to_be_conditional_not_a_certain_load_failure(tmp_path):
    cell = (
        "import msnb_missing_top_xyz\n\n"
        "def handle(data, context):\n"
        "    if data is None and context.model_yaml_config.get('bt'):\n"
        "        import msnb_missing_inner_xyz\n"
        "    return data\n"
    )
    warnings = capture("m", cell, [], search_path=search_path(tmp_path)).warnings
    top = next(w for w in warnings if "msnb_missing_top_xyz" in w)
    inner = next(w for w in warnings if "msnb_missing_inner_xyz" in w)
    assert "the archive would fail to load" in top
    assert "inside a branch or a function" in inner and "would fail where it runs" in inner
    assert "fail to load" not in inner
