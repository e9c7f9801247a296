"""`msnb export`: a notebook file becomes archives without running it."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import nbformat
import pytest
from helpers import BODY, EXAMPLE, IMPORTS, NET, handler, make_notebook, run, standard

from msnb.capture.notebook import load_handlers
from msnb.engines.kserve.layout import kserve_config
from msnb.engines.torchserve.config import parse_properties


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------- the happy path
def test_export_writes_one_mar_per_handler_and_prints_the_table(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("first"), handler("second", "--version 2.1"))
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0, err
    assert listing(tmp_path / "out") == ["first.mar", "second.mar"]  # nothing partial or hidden
    header, *rows = out.strip().splitlines()
    assert header.split()[:4] == ["name", "version", "file", "size"] and "pulled in" in header
    assert rows[0].split()[:2] == ["first", "1.0"] and rows[1].split()[:2] == ["second", "2.1"]
    assert "init_function, preprocess, postprocess" in rows[0] and "Net (cell 3)" in rows[0]
    with zipfile.ZipFile(tmp_path / "out" / "second.mar") as z:
        manifest = json.loads(z.read("MAR-INF/MANIFEST.json"))["model"]
        source = z.read("handler_model.py").decode()
    assert manifest["modelVersion"] == "2.1" and manifest["serializedFile"] == "model.pt"
    assert "demo.ipynb, cell 3" in source and "class Net" in source


def test_relative_paths_resolve_against_the_notebook_folder_not_the_cwd(tmp_path, capsys, monkeypatch):
    nb = standard(tmp_path / "project" / "notebooks")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = run(capsys, "export", nb, "-o", "out")
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "elsewhere" / "out" / "mlp.mar") as z:
        assert z.read("model.pt") == (nb.parent / "weights.pt").read_bytes()


def test_default_outdir_is_model_store_in_the_cwd(tmp_path, capsys, monkeypatch):
    nb = standard(tmp_path / "nb")
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "export", nb)[0] == 0
    assert listing(tmp_path / "model_store") == ["mlp.mar"]


@pytest.mark.parametrize("fmt, expected", [("zip-store", "mlp.mar"), ("no-archive", "mlp"), ("mar", "mlp.mar")])
def test_formats(tmp_path, capsys, fmt, expected):
    nb = standard(tmp_path / "nb")
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--format", fmt)
    assert code == 0, err
    assert listing(tmp_path / "out") == [expected]
    target = tmp_path / "out" / expected
    if fmt == "no-archive":
        assert (target / "MAR-INF" / "MANIFEST.json").is_file() and (target / "model.pt").is_file()
    else:
        with zipfile.ZipFile(target) as z:
            stored = z.getinfo("model.pt").compress_type == zipfile.ZIP_STORED
        assert stored == (fmt == "zip-store")


def test_handler_option_exports_only_the_named_ones(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("a"), handler("b"), handler("c"))
    assert run(capsys, "export", nb, "-o", tmp_path / "out", "--handler", "c", "--handler", "a")[0] == 0
    assert listing(tmp_path / "out") == ["a.mar", "c.mar"]


def test_check_runs_the_example_in_process_and_prints_the_answer(tmp_path, capsys):
    nb = standard(tmp_path / "nb")
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--check")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("check: mlp answered "))
    answer = json.loads(line.removeprefix("check: mlp answered "))
    assert set(answer) == {"label", "scores"} and len(answer["scores"]) == 3


def test_check_failure_writes_nothing_while_no_check_runs_no_user_code(tmp_path, capsys):
    failing = BODY.replace(
        'return torch.tensor(sample["x"], dtype=torch.float32)', 'raise ValueError("boom in preprocess")'
    )
    nb = standard(tmp_path / "nb", handler("bad", body=failing))
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "checked", "--check")
    assert code == 1 and "error: bad:" in err and "boom in preprocess" in err and "Hint:" in err
    assert listing(tmp_path / "checked") == []
    assert run(capsys, "export", nb, "-o", tmp_path / "plain")[0] == 0  # without --check nothing of the user's runs
    assert listing(tmp_path / "plain") == ["bad.mar"]


def test_latest_definition_above_wins_as_run_all_would_leave_it(tmp_path, capsys):
    uses_scale = BODY.replace("return {", 'return {"scale": SCALE, ')
    nb = make_notebook(
        tmp_path / "nb", IMPORTS, NET, "SCALE = 1", "SCALE = 2", handler("mlp", body=uses_scale), "SCALE = 3"
    )
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--check")
    assert code == 0, err
    assert '"scale": 2' in out


def test_definition_only_below_the_handler_cell_is_refused_with_where_it_is(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", IMPORTS, handler("mlp"), NET)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and "error: mlp:" in err and "Net" in err
    assert "defined below the handler cell (Net in demo.ipynb, cell 3)" in err and "Hint: move that cell above" in err
    assert listing(tmp_path / "out") == []


def test_variable_example_is_dropped_with_a_warning(tmp_path, capsys):
    cell = handler("mlp").replace(f"--example '{EXAMPLE}'", "--example sample")
    nb = standard(tmp_path / "nb", cell)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--check")
    assert code == 0, err
    assert "--example sample names a kernel variable" in err


# ---------------------------------------------------------------- bad inputs: each gets a message with a Hint
@pytest.mark.parametrize(
    "content, says",
    [
        ("this is not json {", "not valid notebook JSON"),
        ('{"hello": "world"}', "not a Jupyter notebook"),
        ("", "not valid notebook JSON"),
    ],
)
def test_not_a_notebook_or_corrupt_json(tmp_path, capsys, content, says):
    path = tmp_path / "broken.ipynb"
    path.write_text(content)
    code, out, err = run(capsys, "export", path, "-o", tmp_path / "out")
    assert code == 2 and err.startswith("error: ") and says in err and "Hint:" in err
    assert "Traceback" not in err + out and not (tmp_path / "out").exists()


def test_missing_notebook_file(tmp_path, capsys):
    code, _, err = run(capsys, "export", tmp_path / "nope.ipynb", "-o", tmp_path / "out")
    assert code == 2 and "does not exist" in err and str(tmp_path / "nope.ipynb") in err


def test_nbformat_v3_notebook_is_converted_and_exported(tmp_path, capsys):
    v4 = nbformat.read(str(standard(tmp_path / "nb")), as_version=4)
    v3 = nbformat.convert(v4, 3)
    path = tmp_path / "nb" / "old.ipynb"
    nbformat.write(v3, str(path), version=3)
    assert json.loads(path.read_text())["nbformat"] == 3
    code, out, err = run(capsys, "export", path, "-o", tmp_path / "out")
    assert code == 0, err
    assert listing(tmp_path / "out") == ["mlp.mar"] and "Net (cell 3)" in out


def test_notebook_with_no_handler_cell_says_so_and_exits_1(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", IMPORTS, NET)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and "has no %%ms_handler cell" in err and "Hint:" in err
    assert listing(tmp_path / "out") == []


def test_unknown_handler_lists_the_ones_that_are_there(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("alpha"), handler("beta"))
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--handler", "gamma")
    assert code == 2 and "No handler named 'gamma'" in err and "alpha, beta" in err
    assert listing(tmp_path / "out") == []


def test_dependency_that_lives_only_in_runtime_state_names_the_cell(tmp_path, capsys):
    body = BODY.replace("return Net(hidden)", "return Net(HIDDEN)")
    # computed by a loop: only the kernel that ran it has the value (a statement alone would be rebuilt as code)
    nb = make_notebook(
        tmp_path / "nb", IMPORTS, NET, "HIDDEN = 0\nfor _ in range(8):\n    HIDDEN += 1", handler("mlp", body=body)
    )
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and "error: mlp:" in err and "HIDDEN" in err and "Hint:" in err
    assert "demo.ipynb, cell" in err
    assert listing(tmp_path / "out") == []


def test_checkpoint_missing_relative_to_the_notebook_names_the_resolved_path(tmp_path, capsys, monkeypatch):
    nb = standard(tmp_path / "nb", weights=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and str(tmp_path / "nb" / "weights.pt") in err and "Hint:" in err
    assert listing(tmp_path / "out") == []


def test_checkpoint_naming_a_variable_explains_that_export_reads_the_file(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("mlp").replace("--checkpoint weights.pt", "--checkpoint model"))
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and "the variable 'model'" in err and "torch.save" in err


def test_another_options_error_keeps_its_own_hint_when_the_checkpoint_is_a_name(tmp_path, capsys):
    line = handler("mlp").replace("--checkpoint weights.pt", "--checkpoint model --requirements missing.txt")
    code, _, err = run(capsys, "export", standard(tmp_path / "nb", line), "-o", tmp_path / "out")
    assert code == 1 and "missing.txt' does not exist" in err
    assert "Hint: give an existing requirements file" in err and "the variable 'model'" not in err


def test_two_cells_with_one_name_export_the_later_one_with_a_warning(tmp_path, capsys):
    later = BODY.replace('"scores"', '"later"')
    nb = standard(tmp_path / "nb", handler("mlp"), handler("mlp", body=later))
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--check")
    assert code == 0, err
    assert listing(tmp_path / "out") == ["mlp.mar"] and out.count("mlp.mar") == 1
    assert "warning: mlp: demo.ipynb, cell 4 also define(s) 'mlp'; this later cell wins" in err
    assert '"later"' in out  # --check ran the later cell's handler
    assert [c.cell.number for c in load_handlers(nb, iter(["mlp"]))] == [5]  # names may be any iterable


def test_outdir_not_writable(tmp_path, capsys):
    nb = standard(tmp_path / "nb")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err = run(capsys, "export", nb, "-o", blocker / "out")
    assert code == 2 and "Cannot write to the output folder" in err and "Hint:" in err
    assert blocker.read_text() == "not a folder"


def test_kserve_dir_whose_config_is_a_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "ks").mkdir()
    (tmp_path / "ks" / "config").write_text("in the way")
    code, _, err = run(capsys, "export", standard(tmp_path / "nb"), "--kserve", tmp_path / "ks")
    assert code == 1 and "Cannot write into" in err and "Hint: check what is already there" in err
    assert listing(tmp_path / "ks") == ["config"]  # nothing half-moved


def test_bad_option_line_names_the_cell_and_the_others_still_export(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("good"), "%%ms_handler broken --bogus 1\n" + BODY)
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and "error: broken: demo.ipynb, cell 5: bad %%ms_handler line" in err and "--bogus" in err
    assert listing(tmp_path / "out") == ["good.mar"] and out.splitlines()[1].startswith("good ")


# ---------------------------------------------------------------- KServe layout (files; serving is in test_kserve.py)
def test_kserve_layout_has_model_store_and_config(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("a", "--batch-size 4 --max-batch-delay 20 --workers 2"), handler("b"))
    code, out, err = run(capsys, "export", nb, "--kserve", tmp_path / "ks")
    assert code == 0, err
    assert listing(tmp_path / "ks") == ["config", "model-store"]
    assert listing(tmp_path / "ks" / "model-store") == ["a.mar", "b.mar"]
    props = dict(
        line.split("=", 1)
        for line in (tmp_path / "ks" / "config" / "config.properties").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert props["load_models"] == "all" and props["enable_envvars_config"] == "true"
    assert props["disable_token_authorization"] == "true"
    assert props["inference_address"] == "http://0.0.0.0:8085" and props["metrics_address"] == "http://0.0.0.0:8082"
    snapshot = json.loads(props["model_snapshot"])
    assert snapshot["modelCount"] == 2
    assert snapshot["models"]["a"]["1.0"] == {
        "defaultVersion": True,
        "marName": "a.mar",
        "minWorkers": 2,
        "maxWorkers": 2,
        "batchSize": 1,
        "maxBatchDelay": 20,
        "responseTimeout": 120,
    }
    assert "KServe layout:" in out
    assert "warning: a: --batch-size 4 is set to 1 in the KServe config" in err
    assert "warning: b: --batch-size" not in err  # b asked for no batching: nothing to warn about
    assert "warning: b: its --example (a JSON object) is not a tensor" in err  # the KServe v2 note still applies


def test_kserve_with_an_outdir_reuses_the_archives_instead_of_building_them_again(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("a"), handler("b"))
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--kserve", tmp_path / "ks")
    assert code == 0, err
    for name in ("a.mar", "b.mar"):  # one build, linked into the KServe model store
        assert (tmp_path / "ks" / "model-store" / name).samefile(tmp_path / "out" / name)
    assert out.count("a.mar") == 1 and "KServe layout:" in out


def test_kserve_layout_is_not_written_when_a_handler_fails(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("good"), "%%ms_handler broken --bogus\n" + BODY)
    code, _, err = run(capsys, "export", nb, "--kserve", tmp_path / "ks")
    assert code == 1 and "KServe layout not written" in err
    assert not (tmp_path / "ks").exists()


def test_kserve_with_no_archive_format_is_a_usage_error(tmp_path, capsys):
    nb = standard(tmp_path / "nb")
    code, _, err = run(capsys, "export", nb, "--kserve", tmp_path / "ks", "--format", "no-archive")
    assert code == 2 and "--kserve needs archives" in err


def test_kserve_config_is_one_line_per_property():
    text = kserve_config([])
    assert all("=" in ln for ln in text.splitlines() if not ln.startswith("#"))
    assert json.loads(text.split("model_snapshot=", 1)[1]) == {"name": "startup.cfg", "modelCount": 0, "models": {}}


def test_kserve_config_carries_raised_body_limits_and_a_bad_limit_is_a_usage_error(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("a"))
    code, _, err = run(capsys, "export", nb, "--kserve", tmp_path / "ks", "--max-request-size", "20000000")
    assert code == 0, err
    props = parse_properties((tmp_path / "ks" / "config" / "config.properties").read_text())
    assert props["max_request_size"] == "20000000" and "max_response_size" not in props
    code, _, err = run(capsys, "export", nb, "--kserve", tmp_path / "ks2", "--max-response-size", "0")
    assert code == 2 and "max_response_size=0 is not valid" in err and "Hint:" in err
