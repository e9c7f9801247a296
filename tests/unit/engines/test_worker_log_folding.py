"""A failed load shows its cause once: the worker's first traceback chain, folded, not TorchServe's repeats of it."""

from __future__ import annotations

from msnb.engines.inference_api import log_details
from msnb.engines.torchserve.logs import worker_error
from msnb.templates.msnb_runtime.handler.faults import NO_CUDA_HINT, no_cuda

STORE = "/tmp/msnb-server-x/model_store/cu-1.0"
TORCH = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
# What a worker logs when init_function calls .cuda() on a CPU machine (model_log.log, prefixes as TorchServe writes).
LOGGED = f"""\
Traceback (most recent call last):
  File "{STORE}/handler_model.py", line 8, in init_function
    return torch.nn.Linear(2, 2).cuda()
  File "{TORCH}", line 1000, in cuda
    return self._apply(lambda t: t.cuda(device))
AssertionError: Torch not compiled with CUDA enabled

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{STORE}/msnb_runtime/handler/handler.py", line 240, in _build_model
    model = self.init_function(**self.init_kwargs)
msnb_runtime.handler.load.HandlerLoadError: init_function(**{{}}) raised AssertionError: Torch not compiled with CUDA enabled
Hint: call init_function in the notebook with the same kwargs to see why.
Load model cu cuda OOM, exception init_function(**{{}}) raised AssertionError: Torch not compiled with CUDA enabled
Hint: call init_function in the notebook with the same kwargs to see why.
Traceback (most recent call last):
  File "{STORE}/handler_model.py", line 8, in init_function
    return torch.nn.Linear(2, 2).cuda()
AssertionError: Torch not compiled with CUDA enabled
The above exception was the direct cause of the following exception:
Traceback (most recent call last):
  File "{STORE}/dev_reload.py", line 54, in __call__
    self._start(context)
msnb_runtime.handler.load.HandlerLoadError: init_function(**{{}}) raised AssertionError: Torch not compiled with CUDA enabled
"""


def prefixed(text: str) -> str:
    return "".join(
        f"2026-11-28T10:00:00,000 [INFO ] W-9000-cu_1.0-stdout MODEL_LOG - {line}\n" for line in text.splitlines()
    )


def test_a_cuda_call_in_init_function_shows_its_cause_once_with_the_user_s_line_and_the_cuda_hint():
    lines = worker_error(prefixed(LOGGED))
    text = "\n".join(lines)
    assert sum("Torch not compiled with CUDA enabled" in line for line in lines) == 2  # its exception, its wrapper
    assert "Load model" not in text and "dev_reload.py" not in text and TORCH not in text
    assert "return torch.nn.Linear(2, 2).cuda()" in text and "frame of torch, TorchServe and msnb hidden" in text
    assert lines[-1] == "Hint: call init_function in the notebook with the same kwargs to see why."
    assert len(lines) <= 12 and no_cuda(text) and "CUDA" in NO_CUDA_HINT


class RelayedLineByLine:
    """A log cursor whose traceback arrives as Java relays it: the header first, the rest a few reads later."""

    def __init__(self, whole: str, reads_before_whole: int):
        self.whole, self.reads = whole, reads_before_whole

    def details(self) -> str:
        self.reads -= 1
        return self.whole if self.reads < 0 else "Traceback (most recent call last):\n"


def test_an_error_waits_for_the_whole_traceback_not_its_first_relayed_line():
    whole = 'Traceback (most recent call last):\n  File "cell", line 10, in preprocess\nTypeError: bad'
    assert log_details(RelayedLineByLine(whole, reads_before_whole=3)) == whole
    assert log_details(RelayedLineByLine(whole, reads_before_whole=3), wait=False).startswith("Traceback")
