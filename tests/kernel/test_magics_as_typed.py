"""Magics as people type them, in a real IPython shell: a trailing `# comment` on msnb's magic lines is a comment,
and a `%%ms_handler` cell may start with comment or blank lines."""

from __future__ import annotations

import textwrap

import pytest
import torch

import msnb.errors
import msnb.session.core

pytestmark = pytest.mark.kernel

HANDLER = textwrap.dedent(
    """\
    # A note above the magic, as people write one
    # (and a second line)

    %%ms_handler typed --example '{"x": [1, 2, 3, 4]}'  # the magic line may end with a comment too
    import torch

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 3)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {"label": int(output.argmax())}
    """
)


def notebook_label() -> int:
    torch.manual_seed(0)
    return int(torch.nn.Linear(4, 3)(torch.tensor([1.0, 2.0, 3.0, 4.0])).argmax())


def test_a_handler_cell_below_comments_and_a_line_magic_with_a_comment_work(ip, session):
    cell = ip.run_cell(HANDLER, store_history=True)
    assert cell.success, cell.error_in_exec or cell.error_before_exec
    assert session.specs["typed"].example == {"x": [1, 2, 3, 4]}

    typed = ip.run_cell("answer = %ms_test typed  # instant feedback, no server\nanswer", store_history=True)
    assert typed.success, typed.error_in_exec or typed.error_before_exec
    assert typed.result == {"label": notebook_label()}


def test_a_hash_inside_quoted_arguments_is_kept(ip, session):
    assert ip.run_cell(HANDLER, store_history=True).success
    data = ip.run_cell("""got = %ms_test typed --data '{"x": [1, 2, 3, 4], "tag": "#1"}'  # note\ngot""")
    assert data.success, data.error_in_exec or data.error_before_exec
    assert data.result == {"label": notebook_label()}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there: --device gpu serves on it")
def test_serving_with_device_gpu_on_a_machine_without_one_is_refused_before_anything_starts(ip, session):
    cell = HANDLER.replace("%%ms_handler typed ", "%%ms_handler typed --device gpu ")
    assert ip.run_cell(cell, store_history=True).success
    served = ip.run_cell("%ms_serve typed")
    assert not served.success and isinstance(served.error_in_exec, msnb.errors.SpecError)
    assert "no GPU" in served.error_in_exec.message and "--device auto" in served.error_in_exec.hint
    assert session.server(create=False) is None  # no server was started for it
