"""msnb.test_handler runs the handler in a child process, in batches as the server forms them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import MLP_SOURCE, mlp_model, notebook_answer, poll

import msnb
from msnb.errors import HandlerRunError
from msnb.session.core import Session
from msnb.spec import spec_from_source
from msnb.trial import fork_server, processes
from msnb.trial.batches import BatchFallbackWarning

X = [0.5, -1.0, 2.0, 0.1]
BATCH_ONLY_BUG = MLP_SOURCE.replace("self.fc1(x)", "self.fc1(x.view(1, -1))")  # fine for one sample only
# The model's forward tells how many samples its batch held, and which process ran it.
BATCH_PROBE = textwrap.dedent(
    """
    import os
    import torch

    class Probe(torch.nn.Module):
        def forward(self, x):
            return torch.full((x.shape[0], 2), float(x.shape[0])) * torch.tensor([1.0, 0.0]) + torch.tensor(
                [0.0, float(os.getpid())]
            )

    def init_function():
        return Probe()

    def preprocess(sample):
        return torch.tensor(sample, dtype=torch.float32)

    def postprocess(output):
        return {"batch": int(output[0]), "pid": int(output[1])}
    """
)


@pytest.fixture(autouse=True)
def no_test_process_left():
    yield
    processes.close()


def test_samples_go_in_batches_of_the_batch_size_in_a_process_of_their_own():
    spec = spec_from_source("probe", BATCH_PROBE, batch_size=2)
    answers = msnb.test_handler(spec, [[1.0]] * 5)
    assert [a["batch"] for a in answers] == [2, 2, 2, 2, 1]
    assert len({a["pid"] for a in answers}) == 1 and answers[0]["pid"] != os.getpid()


def test_an_unchanged_handler_is_answered_by_its_process_and_a_changed_one_by_a_fresh_one():
    spec = spec_from_source("probe", BATCH_PROBE)
    [first], [again] = msnb.test_handler(spec, [[1.0]]), msnb.test_handler(spec, [[1.0]])
    [changed] = msnb.test_handler(spec_from_source("probe", BATCH_PROBE + "\n# edited\n"), [[1.0]])
    assert first["pid"] == again["pid"] and changed["pid"] != first["pid"]
    assert not psutil.pid_exists(first["pid"]) or psutil.Process(first["pid"]).status() == psutil.STATUS_ZOMBIE


def test_a_forward_that_breaks_on_a_batch_warns_with_the_error_and_still_answers_right():
    spec = spec_from_source("batchbug", BATCH_ONLY_BUG, init_kwargs={"hidden": 8}, batch_size=4)
    with pytest.warns(BatchFallbackWarning) as caught:
        [answer] = msnb.test_handler(spec, [{"x": X}])
    assert answer == notebook_answer(mlp_model(), X)
    [message] = [str(w.message) for w in caught if issubclass(w.category, BatchFallbackWarning)]
    assert "batched forward of 2 samples failed" in message and "mat1 and mat2 shapes cannot be multiplied" in message
    assert "batching is lost" in message and "Hint: make forward work on a batch" in message


def test_with_batch_size_one_a_single_sample_is_not_doubled(recwarn):
    spec = spec_from_source("batchbug1", BATCH_ONLY_BUG, init_kwargs={"hidden": 8})
    assert msnb.test_handler(spec, [{"x": X}]) == [notebook_answer(mlp_model(), X)]  # the server never batches it
    assert not [w for w in recwarn if issubclass(w.category, BatchFallbackWarning)]


def test_a_segfault_in_the_handler_is_reported_with_the_python_stack(capsys):
    crash = MLP_SOURCE.replace(
        "def preprocess(sample):\n", "def preprocess(sample):\n    import ctypes\n    ctypes.string_at(0)\n"
    )
    with pytest.raises(HandlerRunError) as err:
        msnb.test_handler(spec_from_source("segv", crash, init_kwargs={"hidden": 8}), [{"x": X}])
    assert "died (signal SIGSEGV) while answering" in err.value.message
    assert "Fatal Python error: Segmentation fault" in err.value.details and "preprocess" in err.value.details


def test_what_the_handler_prints_is_shown_and_the_process_state_is_kept(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, modules = sys.path[:], set(sys.modules)
    chatty = MLP_SOURCE.replace(
        "def preprocess(sample):\n", "def preprocess(sample):\n    print('preprocessing', sample)\n"
    )
    assert msnb.test_handler(spec_from_source("chatty", chatty, init_kwargs={"hidden": 8}), [{"x": X}]) == [
        notebook_answer(mlp_model(), X)
    ]
    assert f"preprocessing {{'x': {X}}}" in capsys.readouterr().out
    assert os.getcwd() == str(tmp_path) and sys.path == path
    assert not {m for m in set(sys.modules) - modules if "handler_model" in m or m.startswith("msnb_")}


KILLED_KERNEL = """
import signal
import sys
import msnb
from msnb.spec import spec_from_source
from msnb.trial import fork_server
answer = msnb.test_handler(spec_from_source("k", sys.argv[1]), [[1.0]])[0]
# as an idle ipykernel (an interrupt ends no cell), set before the test reads the pid and interrupts: no race
signal.signal(signal.SIGINT, lambda *_: None)
print(answer["pid"], flush=True)
sys.stdin.read()
"""
LEFTOVER_PREFIXES = ("msnb-forkserver-", "pymp-", "msnb-test-")


@pytest.mark.parametrize(
    ("end", "stdio"),
    [("SIGKILL", subprocess.PIPE), ("SIGKILL", None), ("interrupt, then exit", subprocess.PIPE)],
    ids=["sigkill-piped", "sigkill-inherited", "jupyter-shutdown-piped"],
)
def test_the_test_processes_end_with_their_kernel_quietly_and_leave_no_folder(short_tmp, end, stdio):
    """Jupyter starts a kernel with piped stdio in its own session and interrupts its process group at shutdown."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", KILLED_KERNEL, BATCH_PROBE],
        **{"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": stdio, "text": True},
        env={**os.environ, "TMPDIR": str(short_tmp)},
        start_new_session=True,
    )
    try:
        line = kernel.stdout.readline()
        assert line, kernel.stderr and kernel.stderr.read()
        pid = int(line)
        children = psutil.Process(kernel.pid).children(recursive=True)  # fork server, resource tracker, tests
        assert pid in {c.pid for c in children} and len(children) >= 3
    finally:
        if end == "SIGKILL":
            kernel.send_signal(signal.SIGKILL)
        else:
            os.killpg(kernel.pid, signal.SIGINT)  # what jupyter_client does before a shutdown
    # stdin closed: the kernel exits unless killed; every holder of the pipes gone: the fork server included (a bound,
    # not a wait: seconds on an idle machine, more while CI's other Python and Ray run beside it)
    _, err = kernel.communicate(timeout=60)
    poll(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), 10, "none left")
    assert not [p.name for p in short_tmp.iterdir() if p.name.startswith(LEFTOVER_PREFIXES)]
    assert "Traceback" not in (err or "") and "KeyboardInterrupt" not in (err or "")


# A kernel killed between the fork server's fork and its sending what to run: the new process reads EOF at start.
ORPHANED_FORK = """
import os
import multiprocessing.forkserver
from multiprocessing.forkserver import read_signed
from msnb.trial import fork_server
fork_server.warm_up()
status, start_data = multiprocessing.forkserver._forkserver.connect_to_new_process([])
pid = read_signed(status)  # forked
os.close(start_data)  # as the killed kernel: nothing is sent
print(pid, read_signed(status), flush=True)  # its exit code, once it has ended
"""


def test_a_process_forked_for_a_kernel_killed_before_it_sent_the_work_ends_without_a_traceback(short_tmp):
    done = subprocess.run(
        [sys.executable, "-c", ORPHANED_FORK],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(short_tmp)},
    )
    assert done.returncode == 0 and len(done.stdout.split()) == 2, done.stdout + done.stderr
    assert done.stdout.split()[1] != "0"  # it did end on the EOF
    assert "Traceback" not in done.stderr and "EOFError" not in done.stderr, done.stderr


def test_the_fork_servers_hook_still_prints_every_other_error():
    seen = []
    hook = fork_server.quiet_when_orphaned(lambda kind, value, tb: seen.append(kind))
    hook(EOFError, EOFError("Ran out of input"), None)
    hook(ValueError, ValueError("a real error"), None)
    assert seen == [ValueError]


INTERRUPTED_WARM_UP = """
import multiprocessing.forkserver
import signal
import sys
signal.signal(signal.SIGINT, lambda *_: None)  # an idle ipykernel: an interrupt ends no cell
from msnb.trial import fork_server
fork_server.warm_up()  # returns at once; the fork server imports torch and TorchServe in its own process
print(multiprocessing.forkserver._forkserver._forkserver_pid, fork_server._STATE["ready"].exists(), flush=True)
sys.stdin.readline()
import msnb
from msnb.spec import spec_from_source
msnb.test_handler(spec_from_source("k", sys.argv[1]), [[1.0]])
print(multiprocessing.forkserver._forkserver._forkserver_pid, flush=True)  # the same one, or a restarted one
"""


def test_an_interrupt_while_the_fork_server_imports_neither_ends_it_nor_prints_a_traceback(short_tmp):
    """nbclient shuts a kernel down (an interrupt of its process group first) while its imports may still run."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_WARM_UP, BATCH_PROBE],
        **{"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True},
        env={**os.environ, "TMPDIR": str(short_tmp)},
        start_new_session=True,
    )
    pid, ready = kernel.stdout.readline().split()
    assert ready == "False"  # the interrupt below lands while the fork server imports
    os.killpg(kernel.pid, signal.SIGINT)
    out, err = kernel.communicate("go\n", timeout=120)
    assert kernel.returncode == 0, err
    assert out.split() == [pid]  # the fork server the interrupt reached answered the test: it was not restarted
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


@pytest.fixture
def short_tmp():
    """A kernel's TMPDIR short enough for the fork server's socket path (AF_UNIX allows 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="k"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_stopping_the_session_ends_its_test_processes():
    [answer] = msnb.test_handler(spec_from_source("probe", BATCH_PROBE), [[1.0]])
    process = psutil.Process(answer["pid"])
    Session().stop()  # what %ms_stop does
    poll(lambda: not process.is_running() or process.status() == psutil.STATUS_ZOMBIE, 30, "the test process gone")
