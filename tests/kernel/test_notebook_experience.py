"""In a real IPython shell: readable failures, help and completion, versions, staleness, status and logs."""

from __future__ import annotations

import os
import textwrap

import pytest
from helpers import run_magic as magic
from IPython.utils.capture import capture_output

pytestmark = pytest.mark.kernel

CELL = textwrap.dedent(
    """
    import torch

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 2)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return "{answer}=" + str(len(output))
    """
)
EXAMPLE = """--example '{"x": [1, 2, 3, 4]}'"""


@pytest.fixture
def session(session, monkeypatch, tmp_path):
    """The tier's fresh session, run from a scratch folder (builds write model_store/ there)."""
    monkeypatch.chdir(tmp_path)
    return session


def cell(shell, line: str, body: str = CELL.format(answer="len")) -> str:
    with capture_output() as cap:
        shell.run_cell(f"%%ms_handler {line}\n{body}", store_history=True)
    return "".join([cap.stdout, cap.stderr, *(o.data.get("text/plain", "") for o in cap.outputs)])


def failing(shell, name: str, line: str = "") -> str:
    """`%name line` run as a user's cell: it must fail the cell; returns everything the cell showed."""
    with capture_output() as cap:
        result = shell.run_cell(f"%{name} {line}", store_history=True)
    assert not result.success, f"%{name} {line} should fail its cell"
    return "".join([cap.stdout, cap.stderr, *(o.data.get("text/plain", "") for o in cap.outputs)])


def test_a_wrong_shape_shows_the_users_frame_and_no_torch_internals(ip, session):
    cell(ip, f"kshape {EXAMPLE}")
    out = failing(ip, "ms_test", """kshape --data '{"x": [1, 2, 3]}'""")
    assert "mat1 and mat2 shapes cannot be multiplied" in out and "Hint:" in out
    assert "_call_impl" not in out and "handler/handler.py" not in out and "frames of torch" in out


def test_a_syntax_error_points_at_the_line_as_the_user_sees_the_cell(ip, session):
    out = cell(ip, "ksyntax", "import torch\ndef init_function(:\n    pass\n")
    assert "line 3" in out and "def init_function(:" in out  # %%ms_handler is line 1 of the cell


def test_handler_help_and_completion(ip, session):
    cell(ip, f"kcomplete {EXAMPLE}")
    help_text = ip.find_cell_magic("ms_handler").__doc__
    assert help_text.startswith("Usage: %%ms_handler") and "def preprocess(sample)" in help_text
    assert "kcomplete" in ip.complete("", "%ms_serve kcomp")[1]
    assert "--batch-size" in ip.complete("", "%%ms_handler kcomplete --batch")[1]
    assert "--data" in ip.complete("", "%ms_predict kcomplete --da")[1]


def test_an_unknown_name_shows_no_progress_bar(ip, session):
    out = failing(ip, "ms_build", "knosuch")
    assert "No handler named 'knosuch'" in out and "%" not in out.split("No handler")[0]


def test_builds_of_two_versions_keep_both_archives(ip, session):
    cell(ip, f"kversions --version 1.0 {EXAMPLE}")
    first, _ = magic(ip, "ms_build", "kversions --dev")
    cell(ip, f"kversions --version 1.1 {EXAMPLE}")
    second, out = magic(ip, "ms_build", "kversions --dev")
    assert first == second and (first.parent / "kversions-1.0.mar").is_file() and "kept the archive" in out
    status, _ = magic(ip, "ms_status")
    rows = status["handlers"]["kversions"]["archives"]
    assert {(r["version"], r["stale"]) for r in rows} == {("1.0", True), ("1.1", False)}


def test_an_archive_the_widget_built_from_its_own_fields_is_not_older_than_the_cell(ip, session):
    from msnb.ui.widget.controller import Actions, Controller

    cell(ip, f"kwidget {EXAMPLE}")
    form = Controller("kwidget", Actions.from_session(session))
    form.set("batch_size", "4")  # the widget's own value: the archive's digest is not the cell's
    assert form.run("build"), form.result
    status, _ = magic(ip, "ms_status")
    (row,) = status["handlers"]["kwidget"]["archives"]
    assert row["digest"] != status["handlers"]["kwidget"]["digest"] and not row["stale"]
    assert "older than the cell" not in repr(status)
    cell(ip, f"kwidget {EXAMPLE}", CELL.format(answer="size"))  # the cell changes after the build: now it is
    status, _ = magic(ip, "ms_status")
    assert status["handlers"]["kwidget"]["archives"][0]["stale"] and "older than the cell" in repr(status)


@pytest.mark.server
@pytest.mark.timeout(300)
def test_versions_staleness_status_logs_and_answer_types_on_a_real_torchserve(ip, session):
    cell(ip, f"kstale {EXAMPLE}")
    local, _ = magic(ip, "ms_test", "kstale")
    server, out = magic(ip, "ms_serve", "kstale")
    assert "ready: kstale v1.0 (digest" in out
    served, out = magic(ip, "ms_predict", "kstale")
    assert served == local == "len=2" and "Warning" not in out  # a str answer is a str on both paths
    cell(ip, f"kstale {EXAMPLE}", CELL.format(answer="size"))
    served, out = magic(ip, "ms_predict", "kstale")
    assert served == "len=2" and "Warning: 'kstale' was served from an older version of its cell" in out
    status, _ = magic(ip, "ms_status")
    text = repr(status)
    row = status["handlers"]["kstale"]
    assert row["stale"] and row["served"][0]["default"] and row["url"].endswith("/predictions/kstale")
    assert f"key file: {server.workdir}" in text and "logs: " in text and "(stale)" in text
    assert "<table class='msnb-status-table'>" in status._repr_html_()
    _, out = magic(ip, "ms_serve", "kstale")
    assert "ready: kstale v1.0 (digest" in out and "(generation 2, reloaded in the live worker)" in out
    assert magic(ip, "ms_predict", "kstale")[0] == "size=2"
    logs, out = magic(ip, "ms_logs", "kstale -n 5")
    assert logs is not None and 0 < len(logs.pre.splitlines()) <= 5 and os.path.isdir(server.log_dir)
