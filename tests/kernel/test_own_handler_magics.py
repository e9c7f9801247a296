"""`%%ms_handler` over a user's own TorchServe handler in a real IPython shell: what a user sees."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    OWN_IMAGE_CLASS,
    TS_DESCRIBED,
    TS_STATEFUL_CONFIG,
    TS_STATEFUL_HANDLER,
    TS_STATEFUL_MODEL,
    TS_STREAMING,
)
from IPython.utils.capture import capture_output

pytestmark = pytest.mark.kernel
PIXELS = """--example '{"pixels": [[-3.0, 3.0], [3.0, -3.0]]}'"""


@pytest.fixture(autouse=True)
def session(session):
    """Every test here gets a fresh msnb session (the tier's fixture), used or not."""
    return session


def run(shell, source: str):
    """Run a cell as a notebook does; returns (result, everything shown)."""
    with capture_output() as cap:
        result = shell.run_cell(source, store_history=True)
    shown = [cap.stdout, cap.stderr] + [str(v) for out in cap.outputs for v in out.data.values()]
    return result, "\n".join(shown)


def test_a_handler_class_cell_is_captured_and_ms_test_answers_its_bytes(ip, session):
    result, _ = run(ip, f"%%ms_handler bg {PIXELS}\n{OWN_IMAGE_CLASS}")
    assert result.success and session.specs["bg"].form == "class"
    text = ip.display_formatter.format(result.result)[0]["text/plain"]
    assert "your class BackgroundRemover" in text
    assert isinstance(ip.user_ns["BackgroundRemover"], type), "the cell ran in the user namespace"
    answer, _ = run(ip, "%ms_test bg")
    assert answer.result == b"P5 2 2 255\n" + bytes([0, 255, 255, 0])


def test_roles_and_a_handler_class_in_one_cell_are_refused_with_a_hint(ip, session):
    cell = OWN_IMAGE_CLASS + "\ndef init_function():\n    return torch.nn.Identity()\n"
    _, shown = run(ip, f"%%ms_handler mixed\n{cell}")
    assert "defines both init_function (roles) and handler class `BackgroundRemover`" in shown
    assert "Hint: use one form per handler cell" in shown and "Traceback" not in shown
    assert "mixed" not in session.specs


def test_ms_test_returns_the_chunks_a_handler_sends_as_intermediate_responses(ip, session):
    result, shown = run(ip, f"%%ms_handler chunks --example '{{\"x\": 1}}'\n{TS_STREAMING}")
    assert result.success, shown
    answer, shown = run(ip, "%ms_test chunks")
    assert answer.success, shown
    assert answer.result == ["intermediate_response"] * 3 + ["hello world "]


def test_ms_test_describe_returns_the_customized_metadata_of_describe_handle(ip, session):
    result, shown = run(ip, f"%%ms_handler described\n{TS_DESCRIBED}")
    assert result.success, shown
    answer, shown = run(ip, "%ms_test described --describe")
    assert answer.success, shown
    assert answer.result == {"labels": ["cat", "dog"], "input": "json"}


def test_ms_test_describe_with_an_input_is_refused_with_a_hint(ip, session):
    run(ip, f"%%ms_handler described\n{TS_DESCRIBED}")
    answer, shown = run(ip, "%ms_test described --describe --data '{\"x\": 1}'")
    assert not answer.success and "takes neither --data" in shown and "Hint:" in shown


WORDS = """
def handle(data, context):
    if data is None:
        return None
    return [PATTERN.findall(row["body"]) for row in data]
"""


def test_a_module_level_statement_reading_a_kernel_only_file_fails_ms_test_with_its_cell_and_line(
    ip, session, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pattern.txt").write_text(r"\w+")  # beside the notebook: the server's worker never sees it
    result, shown = run(
        ip, "import re\nfrom pathlib import Path\nPATTERN = re.compile(Path('pattern.txt').read_text())"
    )
    assert result.success, shown
    result, shown = run(ip, f"%%ms_handler words --example '\"a b\"'\n{WORDS}")
    assert result.success, shown
    answer, shown = run(ip, "%ms_test words")
    assert not answer.success
    assert "at `PATTERN = re.compile(Path('pattern.txt').read_text())` (from cell In[" in shown
    assert "FileNotFoundError" in shown and "Hint:" in shown and "--extra-files" in shown
    assert "Traceback (most recent" not in shown


def test_ms_test_sends_each_sequences_requests_with_its_header_and_each_sequence_keeps_its_own_state(
    ip, session, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model-config.yaml").write_text(TS_STATEFUL_CONFIG)
    train = "\ntorch.manual_seed(0)\nnet = Scale()\ntorch.save(net.state_dict(), 'w.pt')\n"
    result, shown = run(ip, TS_STATEFUL_MODEL + train)
    assert result.success, shown
    line = "%%ms_handler stateful --checkpoint w.pt --model-file Scale --config-file model-config.yaml"
    result, shown = run(ip, f"{line}\n{TS_STATEFUL_HANDLER}")
    assert result.success, shown
    got, totals, truth = [], {}, []
    for sequence, number in [("a", 3), ("b", 10), ("a", 4), ("b", -1), ("a", 1)]:
        (tmp_path / "n.txt").write_text(str(number))  # curl -H "ts_request_sequence_id: a" -T n.txt
        answer, shown = run(ip, f"%ms_test stateful --data-binary @n.txt --header ts_request_sequence_id:{sequence}")
        assert answer.success, shown
        got.append(answer.result)
        totals[sequence] = totals.get(sequence, 0) + number
        truth.append(round(ip.user_ns["net"](torch.tensor([[float(totals[sequence])]]))[0, 0].item(), 4))
    assert got == truth
