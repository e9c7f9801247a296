"""The magics in a real IPython shell: a user's cells, then what they see."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import mlp_class
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import msnb
import msnb.errors
import msnb.session.core
from msnb.spec import HandlerSpec
from msnb.ui.display import Status

pytestmark = pytest.mark.kernel

NET_CELL = "import torch\n" + mlp_class("KNet") + "\nKSCALE = 2.0\n"
HANDLER = textwrap.dedent(
    """
    import torch

    def init_function(hidden=8):
        torch.manual_seed(0)
        return KNet(hidden)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32) * KSCALE

    def postprocess(output):
        return {"label": int(output.argmax())}
    """
)
EXAMPLE = """--example '{"x": [1, 2, 3, 4]}'"""


@pytest.fixture(scope="module")
def ip(ip):
    """The kernel tier's shell, with the KNet cell executed (it is in the history)."""
    user_cell(ip, NET_CELL)
    return ip


@pytest.fixture(autouse=True)
def session(session):
    """Every test here gets a fresh msnb session (the tier's fixture), used or not."""
    return session


def user_cell(shell, source: str):
    """Run a cell the way a notebook does (stored in history); it must succeed."""
    result = shell.run_cell(source, store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def handler_cell(shell, line: str, body: str = HANDLER):
    """Run a `%%ms_handler` cell as a user would; returns (magic result, everything shown)."""
    with capture_output() as cap:
        result = shell.run_cell(f"%%ms_handler {line}\n{body}", store_history=True)
    return result, shown(cap)


def shown(cap) -> str:
    parts = [cap.stdout, cap.stderr]
    for out in cap.outputs:
        parts += [str(v) for v in out.data.values()]
    return "\n".join(parts)


def line_magic(shell, name: str, line: str):
    """Run ``%name line`` as a cell; returns (its value, None when the cell failed, and everything shown)."""
    with capture_output() as cap:
        result = shell.run_cell(f"%{name} {line}")
    return (result.result if result.success else None), shown(cap)


# ------------------------------------------------------------------ the happy path
def test_handler_cell_runs_captures_and_shows_a_summary(ip, session):
    result, _ = handler_cell(ip, f"knet --version 2.0 --batch-size 4 {EXAMPLE}")
    assert result.success
    spec = result.result
    assert isinstance(spec, HandlerSpec) and session.specs["knet"] is spec
    assert callable(ip.user_ns["init_function"]), "the cell ran in the user namespace"
    pulled = {n: b.origin for b in spec.pulled_in for n in b.names}
    assert {"KNet", "KSCALE"} <= set(pulled) and pulled["KNet"].label.startswith("cell In[")
    text = ip.display_formatter.format(spec)[0]["text/plain"]  # what a terminal shows as Out[n]
    html = ip.display_formatter.formatters["text/html"].lookup(spec)(spec)  # what a notebook shows (off in a terminal)
    assert "KNet" in text and "pulled in" in text and "from cell In[" in text
    assert "batchSize=4" in html and "v2.0" in html and "<table>" in html


def test_rerunning_the_cell_replaces_the_spec(ip, session):
    handler_cell(ip, "knet2 --version 1.0")
    result, _ = handler_cell(ip, "knet2 --version 3.0")
    assert session.specs["knet2"].version == "3.0" and result.result is session.specs["knet2"]


def test_help_lists_every_option(ip):
    doc = ip.find_cell_magic("ms_handler").__doc__
    for option in ("--checkpoint", "--init-kwargs", "--batch-size", "--max-batch-delay", "--example", "--device"):
        assert option in doc


def test_ms_test_answers_in_process_with_data_or_the_example(ip):
    handler_cell(ip, f"ktest {EXAMPLE}")
    answer, _ = line_magic(ip, "ms_test", "ktest")
    assert answer == {"label": answer["label"]} and answer == in_notebook(ip, {"x": [1, 2, 3, 4]})
    # Two inputs the notebook's own functions label differently: an ignored --data could not answer both.
    first, second = distinct_inputs(ip)
    ip.user_ns["my_sample"] = first
    assert line_magic(ip, "ms_test", "ktest --data my_sample")[0] == in_notebook(ip, first)
    assert line_magic(ip, "ms_test", f"ktest --data '{json.dumps(second)}'")[0] == in_notebook(ip, second)


def in_notebook(ip, sample):
    """What the cell's own functions answer when called directly in the kernel (no msnb involved)."""
    ns = ip.user_ns
    with torch.inference_mode():
        return ns["postprocess"](ns["init_function"]()(ns["preprocess"](sample)))


def distinct_inputs(ip) -> tuple[dict, dict]:
    candidates = [{"x": [a, b, -a, -b]} for a in (-4, -1, 0.5, 3) for b in (-2, 1, 4)]
    by_label = {in_notebook(ip, c)["label"]: c for c in candidates}
    assert len(by_label) >= 2, "the seeded KNet labels every candidate alike; pick other candidates"
    first, second = list(by_label.values())[:2]
    return first, second


def test_ms_test_with_a_bad_sample_shows_the_error_not_a_traceback(ip):
    handler_cell(ip, "kbad")
    value, out = line_magic(ip, "ms_test", """kbad --data '{"y": 1}'""")
    assert value is None and "Hint:" in out and "Traceback (most recent call last)" not in out.split("Hint:")[0]


def test_a_failing_test_points_at_the_cells_and_their_lines_not_at_the_rendered_file(ip):
    handler_cell(ip, "kframes")
    _, out = line_magic(ip, "ms_test", """kframes --data '{"x": "oops"}'""")  # preprocess: line 10 with %%ms_handler
    assert "cell In[" in out.split(", line 10, in preprocess")[0].splitlines()[-1], out  # IPython's name of the cell
    assert "handler_model.py" not in out and "msnb-forkserver" not in out, out
    _, out = line_magic(ip, "ms_test", """kframes --data '{"x": [1, 2, 3]}'""")  # KNet.forward, pulled in from its cell
    assert ", in forward" in out and "cell In[" in out and "handler_model.py" not in out, out


def test_a_misspelt_role_is_said_at_capture_and_when_the_test_fails(ip):
    _, shown_at_capture = handler_cell(ip, "ktypo", HANDLER.replace("def preprocess(", "def preprocces("))
    assert (
        "did you mean `preprocess`?" in shown_at_capture
        and "Hint: rename `preprocces` to `preprocess`" in shown_at_capture
    )
    value, out = line_magic(ip, "ms_test", """ktypo --data '{"x": [1, 2, 3, 4]}'""")
    assert value is None and "Role `preprocess` was not found: the cell defines `preprocces`" in out, out
    assert "Hint: rename `preprocces` to `preprocess`" in out and out.count("must be Tensor, not list") == 1, out


def test_ms_test_explain_shows_attribution_bars_in_process(ip):
    handler_cell(ip, f"kexplain {EXAMPLE}")
    explanation, _ = line_magic(ip, "ms_test", "kexplain --explain")
    answer = explanation.answer
    assert (
        answer["method"] == "integrated_gradients" and answer["target"] == in_notebook(ip, {"x": [1, 2, 3, 4]})["label"]
    )
    assert len(explanation.attributions) == 4
    html = explanation._repr_html_()  # what a notebook front-end shows (this test shell has no HTML formatter)
    assert html.count("display:flex") == 4 and "integrated gradients" in html  # one bar per feature


def test_ms_explain_before_serve_says_what_to_run_first(ip):
    handler_cell(ip, f"kexplain2 {EXAMPLE}")
    value, out = line_magic(ip, "ms_explain", "kexplain2")
    assert value is None and "No local TorchServe is running" in out and "Hint: run %ms_serve kexplain2" in out


@pytest.mark.server
@pytest.mark.timeout(240)
def test_ms_explain_asks_the_served_model(ip, session, tmp_path):
    handler_cell(ip, f"kexserved {EXAMPLE}")
    local, _ = line_magic(ip, "ms_test", "kexserved --explain")
    assert line_magic(ip, "ms_serve", "kexserved")[0] is not None
    served, out = line_magic(ip, "ms_explain", "kexserved")
    assert served.answer["target"] == local.answer["target"], out
    assert served.attributions == pytest.approx(local.attributions, abs=1e-5)
    assert "[  0]" in repr(served)
    (tmp_path / "body.json").write_text('{"x": [1, 2, 3, 4]}')
    sent = f"kexserved --data-binary @{tmp_path / 'body.json'} --content-type application/json --header x-trace:1"
    raw, out = line_magic(ip, "ms_explain", sent)  # the body as a client sends it, with %ms_predict's options
    assert raw is not None, out
    assert raw.answer["target"] == served.answer["target"], out
    assert raw.attributions == pytest.approx(served.attributions, abs=1e-6)
    bad, out = line_magic(ip, "ms_explain", """kexserved --data '{"x": [1, 2, 3, 4], "target": 5}'""")
    assert bad is None and "HTTP 400" in out and "Hint: send a 'target' from 0 to 2" in out


def test_checkpoint_variable_and_build_with_progress(ip, session, tmp_path):
    user_cell(ip, "kmodel = KNet(8)")
    handler_cell(ip, f"kbuild --checkpoint kmodel {EXAMPLE}")
    assert session.specs["kbuild"].checkpoint is ip.user_ns["kmodel"]
    path, out = line_magic(ip, "ms_build", f"kbuild --export-path {tmp_path} --dev")
    assert isinstance(path, Path) and path.is_file() and path.parent == tmp_path
    assert "Building kbuild" in out and "100%" in out
    status, _ = line_magic(ip, "ms_status", "")
    assert isinstance(status, Status) and status["archives"]["kbuild"] == str(path)
    assert "kbuild" in repr(status) and not status["server"]["running"]


# ------------------------------------------------------------------ bad inputs: each gets a message with a Hint
@pytest.mark.parametrize(
    "body, says",
    [
        ("def init_function(:\n    pass\n", "SyntaxError"),
        (
            "raise ValueError('boom in the handler cell')\ndef init_function():\n    return None\n",
            "boom in the handler cell",
        ),
    ],
)
def test_a_failing_cell_shows_its_own_error_and_stores_nothing(ip, session, body, says):
    result, out = handler_cell(ip, "kfail", body)
    assert result.result is None and "kfail" not in session.specs
    assert says in out


@pytest.mark.parametrize(
    "body, says",
    [
        ("import torch\ndef make_model():\n    return torch.nn.Linear(1, 1)\n", ["init_function", "Hint:"]),
        (
            HANDLER.replace("def preprocess(sample):", "def preprocess(sample, extra):"),
            ["preprocess", "def preprocess(sample)"],
        ),
        ("def init_function():\n    return undefined_helper_q7()\n", ["undefined_helper_q7", "Hint:"]),
    ],
)
def test_a_bad_handler_is_refused_with_a_hint(ip, session, body, says):
    result, out = handler_cell(ip, "krefused", body)
    assert not result.success and result.result is None and "krefused" not in session.specs
    for text in says:
        assert text in out
    assert "Traceback" not in out


def test_a_failing_magic_fails_its_cell_and_shows_only_the_message_and_hint(ip, session):
    with capture_output() as cap:
        result = ip.run_cell("%ms_test kmissing_q9 --data '[1]'")
    out = shown(cap)
    assert not result.success and result.error_in_exec is not None, "Run All must stop here"
    assert "No handler named 'kmissing_q9'" in out and "Hint: run its %%ms_handler cell first" in out
    assert "Traceback" not in out and "msnb/session/core.py" not in out
    with pytest.raises(msnb.errors.SpecError):  # the Python API raises as before
        msnb.test_handler("kmissing_q9", [1])


def test_a_name_bound_only_at_runtime_is_snapshotted_from_the_kernel(ip, session):
    user_cell(ip, "import torch\nkweights_rt = torch.zeros(3)")
    result, out = handler_cell(ip, "kruntime", "def init_function():\n    return KNet(int(kweights_rt.sum()) + 8)\n")
    assert result.success and "kruntime" in session.specs
    assert "value: kweights_rt: Tensor float32 [3]" in out
    assert session.specs["kruntime"].values.names == ("kweights_rt",)


@pytest.mark.parametrize(
    "line, says",
    [
        ("kopt --bogus 3", "--bogus"),
        ("kopt --batch-size many", "--batch-size"),
        ("kopt --example '{not json}'", "--example"),
    ],
)
def test_bad_options_raise_usage_error(ip, session, line, says):
    with pytest.raises(UsageError, match="Hint") as err:
        ip.run_cell_magic("ms_handler", line, HANDLER)
    assert says in str(err.value) and "kopt" not in session.specs


def test_checkpoint_variable_that_is_not_a_model_is_refused(ip, session):
    user_cell(ip, "kcheckpoint_list = [1, 2, 3]")
    result, out = handler_cell(ip, "kckpt --checkpoint kcheckpoint_list")
    assert result.result is None and "kckpt" not in session.specs
    assert "not a model or state_dict" in out and "Hint:" in out


def test_predict_before_serve_says_what_to_run_first(ip):
    handler_cell(ip, f"kearly {EXAMPLE}")
    value, out = line_magic(ip, "ms_predict", "kearly")
    assert value is None and "%ms_serve kearly" in out
    value, out = line_magic(ip, "ms_predict", """knowhere --data '{"x": 1}'""")
    assert value is None and "%%ms_handler" in out and "knowhere" in out


def test_predict_without_data_or_example_says_how_to_give_one(ip):
    handler_cell(ip, "knodata")
    value, out = line_magic(ip, "ms_predict", "knodata")
    assert value is None and "No input to send to 'knodata'" in out and "Hint: pass --data" in out


def test_widget_is_returned_for_display(ip):
    pytest.importorskip("msnb.ui.widget")
    handler_cell(ip, f"kwidget {EXAMPLE}")
    widget, _ = line_magic(ip, "ms_widget", "kwidget")
    assert widget is not None and hasattr(widget, "_repr_mimebundle_")


# ------------------------------------------------------------------ with a real TorchServe
@pytest.mark.server
@pytest.mark.timeout(240)
def test_serve_predict_stop_on_a_real_torchserve(ip, session):
    handler_cell(ip, f"kserved --batch-size 1 {EXAMPLE}")
    expected, _ = line_magic(ip, "ms_test", "kserved")
    server, out = line_magic(ip, "ms_serve", "kserved")
    assert server is not None and server.running, out
    assert "ready: kserved v1.0 (digest " in out and "at http://127.0.0.1" in out
    answer, out = line_magic(ip, "ms_predict", "kserved")
    assert answer == expected and re.search(r"kserved answered in \d+(\.\d)? m?s", out), out
    bad, out = line_magic(ip, "ms_predict", """kserved --data '{"x": "oops"}'""")
    assert bad is None and "Hint:" in out
    # the worker's traceback names the cell's line (line 1: %%ms_handler), not the served handler_model.py's
    assert "line 10, in preprocess" in out and "handler_model.py" not in out, out
    server.stop()  # restarted by hand (as an error hint suggests): it serves nothing until %ms_serve
    server.start()
    value, out = line_magic(ip, "ms_predict", "kserved")
    assert value is None and "%ms_serve kserved" in out
    assert line_magic(ip, "ms_serve", "kserved")[0] is server
    assert line_magic(ip, "ms_predict", "kserved")[0] == expected
    server_url = server.inference_url
    stopped, _ = line_magic(ip, "ms_stop", "")
    assert not server.running and not line_magic(ip, "ms_status", "")[0]["server"]["running"]
    assert repr(stopped).startswith(f"Stopped the local TorchServe at {server_url} (it served kserved v1.0")


@pytest.mark.server
@pytest.mark.timeout(240)
def test_a_postprocess_edit_reloads_and_status_says_so(ip, session):
    handler_cell(ip, f"kreload {EXAMPLE}")
    line_magic(ip, "ms_serve", "kreload")
    handler_cell(ip, f"kreload {EXAMPLE}", HANDLER.replace('{"label": int(output.argmax())}', '{"edited": 1}'))
    _, out = line_magic(ip, "ms_serve", "kreload")
    assert line_magic(ip, "ms_predict", "kreload")[0] == {"edited": 1}, out
    status, _ = line_magic(ip, "ms_status", "")
    (row,) = status["handlers"]["kreload"]["served"]
    assert (row["version"], row["generation"], row["redeploy"]) == ("1.0", 2, "reload")
    assert "generation 2 (last: reload" in status._repr_html_()
    handler_cell(ip, f"kreload --batch-size 4 {EXAMPLE}")
    line_magic(ip, "ms_serve", "kreload")
    (row,) = line_magic(ip, "ms_status", "")[0]["handlers"]["kreload"]["served"]
    assert row["redeploy"] == "new version" and "--batch-size changed" in row["why"] and row["generation"] == 1
