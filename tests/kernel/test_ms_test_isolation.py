"""%ms_test runs the handler in a child process: the kernel keeps its cwd, path and modules, and survives a crash."""

from __future__ import annotations

import sys
import time

import pytest
import torch
from test_magics import EXAMPLE, HANDLER, NET_CELL, handler_cell, in_notebook, line_magic, user_cell

pytestmark = pytest.mark.kernel

LOCAL_MODULE = "SHIFT = 0.5\n"
EXITING = HANDLER.replace(
    "def preprocess(sample):\n",
    "def preprocess(sample):\n    import os\n    print('about to leave', flush=True)\n    os._exit(1)\n",
)
KERNEL_STATE = "import os, sys\n(os.getcwd(), list(sys.path), sys.modules.get('klocal_shift'))"


@pytest.fixture(scope="module")
def ip(ip):
    """The kernel tier's shell, with the KNet cell executed (it is in the history)."""
    user_cell(ip, NET_CELL)
    return ip


@pytest.fixture(autouse=True)
def session(session):
    return session


def test_a_handler_that_exits_in_preprocess_is_a_worker_crash_and_the_kernel_survives(ip):
    handler_cell(ip, f"kexit {EXAMPLE}", EXITING)
    value, out = line_magic(ip, "ms_test", "kexit")
    assert value is None and "died (exit code 1) while answering" in out and '"Worker died."' in out
    assert "Hint: the handler (or a library it calls) ended the process: os._exit()" in out
    assert "last lines of the test process's stdout:\nabout to leave" in out
    assert user_cell(ip, "21 * 2") == 42  # this very process is the kernel: it goes on
    handler_cell(ip, f"kexit {EXAMPLE}")  # the fixed cell tests again
    assert line_magic(ip, "ms_test", "kexit")[0] == in_notebook(ip, {"x": [1, 2, 3, 4]})


def test_a_cell_run_while_the_widget_tests_keeps_its_cwd_path_and_local_modules(ip, tmp_path, monkeypatch):
    pytest.importorskip("msnb.ui.widget")
    (tmp_path / "klocal_shift.py").write_text(LOCAL_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    user_cell(ip, "import klocal_shift")
    body = HANDLER.replace("* KSCALE", "* KSCALE + klocal_shift.SHIFT").replace(
        "import torch\n", "import torch\nimport klocal_shift\n", 1
    )
    handler_cell(ip, f"kwidget_test {EXAMPLE}", body)
    before = user_cell(ip, KERNEL_STATE)
    widget, _ = line_magic(ip, "ms_widget", "kwidget_test")
    widget.buttons["test"].click()
    seen, deadline = [], time.monotonic() + 120
    while widget.controller.running is not None and time.monotonic() < deadline:
        seen.append(user_cell(ip, KERNEL_STATE))  # a user's cell while the widget's test runs
    assert widget.wait(60) and seen, "the widget's test did not run, or did not finish"
    assert all(state == before for state in seen) and before[0] == str(tmp_path)
    assert before[2] is sys.modules["klocal_shift"] and before[2].__file__ == str(tmp_path / "klocal_shift.py")
    expected = _expected(ip, {"x": [1, 2, 3, 4]})
    assert widget.controller.result_ok and f"'label': {expected}" in widget.controller.result.replace('"', "'")


def _expected(ip, sample: dict) -> int:
    ns = ip.user_ns
    with torch.inference_mode():
        model = ns["init_function"]()
        return int(model(ns["preprocess"](sample)).argmax())
