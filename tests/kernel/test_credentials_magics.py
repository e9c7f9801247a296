"""In a real IPython shell: a `%%ms_handler` cell whose archive would carry a key fails its cell with the message and
its hint, a key the handler reads at run time from a kernel variable too; `--allow-secret` lets one through and the
capture summary lists it."""

from __future__ import annotations

import pytest
from helpers import run_cell
from IPython.utils.capture import capture_output

OPENAI_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" + "T3BlbkFJ" + "Ab3dEf6hIj9kLm2nOp5qR"
HANDLER = """\
import torch

def init_function():
    return torch.nn.Identity()

def postprocess(output):
    return {"n": len(cred_openai_key)}
"""


def failing_cell(shell, source: str) -> str:
    with capture_output() as cap:
        result = shell.run_cell(source, store_history=True)
    assert not result.success
    return cap.stdout + cap.stderr


@pytest.fixture
def session(session, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return session


def test_a_runtime_key_fails_the_handler_cell_and_a_named_one_is_let_through(ip, session):
    run_cell(ip, f"cred_openai_key = ''.join({list(OPENAI_KEY)!r})")  # built at run time, a plain kernel str
    shown = failing_cell(ip, f"%%ms_handler creds\n{HANDLER}")
    assert "The archive of 'creds' would carry a secret from the notebook: `cred_openai_key` (a runtime value" in shown
    assert "OpenAI Token (sk-p..., 68 characters)" in shown and OPENAI_KEY not in shown
    assert "Hint: read it on the server from the environment" in shown and "--env" in shown
    assert "creds" not in session.specs
    summary = run_cell(ip, f"%%ms_handler creds --allow-secret cred_openai_key\n{HANDLER}")
    assert "secret let through by --allow-secret cred_openai_key: `cred_openai_key`" in summary
    assert OPENAI_KEY not in summary
    assert "creds" in session.specs
