"""A script that exits right after a `%%ms_handler` cell (the test processes' fork server still importing torch)
prints no traceback from msnb's own processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.kernel

SCRIPT = textwrap.dedent(
    '''
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "msnb")
    result = shell.run_cell("""%%ms_handler quick
    import torch

    def init_function():
        return torch.nn.Linear(2, 2)
    """)
    print("captured:", result.success, flush=True)
    '''
)


def test_a_script_that_exits_right_after_a_handler_cell_prints_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0 and "captured: True" in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "FileNotFoundError" not in done.stderr, done.stderr
