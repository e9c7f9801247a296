"""What a real TorchServe answers when things go wrong: strict JSON, crashes explained, limits, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from helpers import ECHO, MLP_MODEL, build_mar, poll, processes_naming, strict_loads

from msnb.engines import watchdog
from msnb.engines.models import PredictionError
from msnb.engines.torchserve import LocalServer
from msnb.errors import ServerError
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source

pytestmark = pytest.mark.server

HANDLER = (
    "import os, signal\n"
    + MLP_MODEL
    + textwrap.dedent(
        """
    def preprocess(sample):
        if sample.get("crash") == "exit":
            print("preprocess: leaving with os._exit(3)", flush=True)
            os._exit(3)
        if sample.get("crash") == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return output.tolist()
    """
    )
)
GOOD = {"x": [1, 2, 3, 4]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("reliable"), max_request_size=4000) as server:
        deploy(server, spec_from_source("fragile", HANDLER, batch_size=4, max_batch_delay=300))
        yield server


# ------------------------------------------------------------------ strict JSON
def test_overflow_and_nan_inputs_get_strict_json_answers_and_the_good_ones_still_succeed(served):
    answers = served.predict_many("fragile", [GOOD, {"x": [1e39, 0, 0, 0]}, GOOD], return_exceptions=True)
    assert isinstance(answers[0], list) and answers[0] == answers[2]
    assert isinstance(answers[1], PredictionError) and answers[1].status == 400, "the input overflowed float32"
    assert "NaN or Infinity" in str(answers[1]) and "overflow float32" in str(answers[1])
    client = served.client  # a client that does not refuse NaN itself: what curl or a browser would send
    resp = client.call(
        "POST",
        f"{served.inference_url}/predictions/fragile",
        "inference",
        data=b'{"x": [NaN, 1, 2, 3]}',
        headers={"Content-Type": "application/json"},
    )
    body = strict_loads(resp.text)
    assert resp.status_code == 400 and "NaN or Infinity" in body["error"] and "send finite numbers" in body["hint"]


# ------------------------------------------------------------------ crashes
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "how, expected", [("exit", "preprocess: leaving with os._exit(3)"), ("segfault", "Segmentation fault")]
)
def test_a_worker_crash_fails_its_batch_and_every_failure_carries_the_workers_last_lines(served, how, expected):
    poll(lambda: served.status("fragile").ready, 30, "a ready worker")
    answers = served.predict_many("fragile", [GOOD, {"crash": how}, GOOD], return_exceptions=True)
    assert all(isinstance(a, PredictionError) and a.status == 500 for a in answers), answers
    for err in answers:
        text = err.render()
        assert "Worker died" in text and "every request of that batch failed" in text
        assert expected in text and "Worker disconnected" in text
    if how == "segfault":
        assert any("preprocess" in a.details for a in answers), "faulthandler shows the crashing frame"
    poll(lambda: _answers(served), 30, "answers again after the worker restarted")


def _answers(server) -> bool:
    try:
        return isinstance(server.predict("fragile", GOOD), list)
    except ServerError:
        return False


# ------------------------------------------------------------------ limits
def test_a_body_over_the_request_limit_names_the_limit_and_the_option(served):
    assert isinstance(served.predict("fragile", {**GOOD, "pad": "a" * 3000}), list)  # under the raised 4000 bytes
    with pytest.raises(PredictionError) as err:
        served.predict("fragile", {**GOOD, "pad": "a" * 5000})
    text = err.value.render()
    assert err.value.status == 413 and "max_request_size (4000 bytes)" in text
    assert "LocalServer(max_request_size=BYTES)" in text and "--max-request-size" in text


# ------------------------------------------------------------------ versions and unregister
@pytest.mark.parametrize("version", ["1/2", "1?x=y", "1#a", ""])
def test_an_archive_with_an_unusable_version_is_refused_before_it_is_placed(clean_server, tmp_path, version):
    folder = tmp_path / "bad"
    (folder / "MAR-INF").mkdir(parents=True)
    manifest = {"model": {"modelName": "bad", "modelVersion": version, "handler": "h.py"}}
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    with pytest.raises(ServerError, match="Model version") as err:
        clean_server.register(folder)
    assert "Hint:" in err.value.render()
    assert not any(clean_server.model_store.iterdir()) and clean_server.models() == []


def test_unregister_deletes_the_store_files_after_the_server_confirms(clean_server, tmp_path):
    clean_server.register(build_mar(tmp_path / "mars", "echo", ECHO))
    clean_server.unregister("echo")
    assert clean_server.models() == [] and not any(clean_server.model_store.iterdir())
    with pytest.raises(ServerError, match="No model 'echo'"):
        clean_server.unregister("echo")


# ------------------------------------------------------------------ nothing left on disk
@pytest.mark.timeout(120)
def test_an_owner_killed_with_sigkill_leaves_no_model_store(tmp_path):
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    tmp = Path(tempfile.mkdtemp(prefix="msnb-t-"))  # short: worker sockets live under the workdir
    owner = (
        "import sys\nfrom msnb.engines.torchserve import LocalServer\nserver = LocalServer().start()\n"
        "server.register(sys.argv[1])\nprint(server.workdir, flush=True)\nsys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", owner, str(mar)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    workdir = Path(proc.stdout.readline().strip())
    assert workdir.parent == tmp and any((workdir / "model_store").iterdir())
    proc.kill()
    proc.wait()
    assert poll(lambda: not processes_naming(workdir) and not (workdir / "model_store").exists(), 30)
    assert (workdir / "logs").is_dir()


def test_a_start_removes_the_model_stores_that_dead_owners_left(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, alive = tmp_path / "msnb-server-stale", tmp_path / "msnb-server-alive"
    for workdir in (stale, alive):
        (workdir / "model_store").mkdir(parents=True)
        (workdir / "model_store" / "m.pt").write_bytes(b"weights")
        (workdir / "logs").mkdir()
    (stale / watchdog.OWNER_FILE).write_text(json.dumps({"pid": dead.pid, "started": 0}))
    watchdog.mark_owner(alive)  # this test process: alive
    with LocalServer(tmp_path / "mine"):
        pass
    assert not (stale / "model_store").exists() and (stale / "logs").is_dir()
    assert (alive / "model_store" / "m.pt").is_file()
