"""Code-only edits reload inside the live worker of the notebook's local server; other edits take a new version."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import psutil
import pytest
import requests
import torch
from helpers import MLP_MODEL, mlp_model, notebook_answer, poll

from msnb.engines.torchserve import LocalServer
from msnb.errors import ServerError
from msnb.session.core import Session
from msnb.session.reload import NEW_VERSION, RELOAD
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.dev.reload import RELOAD_HEADER, SECRET_FILE

SAMPLE = {"x": [1.0, -2.0, 0.5, 3.0]}


def edit(tag: int, init_line: str = "") -> str:
    """The MLP handler whose postprocess answers with ``tag`` (the code edit a user makes)."""
    source = (
        MLP_MODEL.replace("    torch.manual_seed(0)\n", f"    torch.manual_seed(0)\n{init_line}")
        if init_line
        else MLP_MODEL
    )
    return source + (
        "\ndef preprocess(sample):\n    return torch.tensor(sample['x'], dtype=torch.float32)\n\n"
        f"def postprocess(output):\n    return {{'tag': {tag}, 'label': int(output.argmax())}}\n"
    )


@pytest.fixture
def session(clean_server):
    """A fresh session on the module's server (tests/server/conftest.py): a reload's subject is the model's worker,
    not the server, so the tests share one TorchServe start and each leaves no model on it."""
    return Session(lambda engine, port: clean_server)


def spec(tag: int, tmp_path, **config):
    ckpt = tmp_path / "mlp.pt"
    if not ckpt.exists():
        torch.save(mlp_model(8).state_dict(), ckpt)
    return spec_from_source("mlp", edit(tag, config.pop("init_line", "")), checkpoint=str(ckpt), **config)


def truth(tag: int, tmp_path) -> dict:
    """The notebook's own answer to SAMPLE: the edited cell run here as plain Python (no msnb), its model given the
    checkpoint's weights, plain torch on a batch of one, then the cell's own postprocess."""
    namespace: dict = {}
    exec(edit(tag), namespace)
    model = namespace["init_function"]()
    model.load_state_dict(torch.load(tmp_path / "mlp.pt", weights_only=True))
    return notebook_answer(model.eval(), SAMPLE["x"], namespace["postprocess"])


def worker(server: LocalServer) -> psutil.Process:
    (model,) = [m for m in server.models() if m.name == "mlp"]
    return psutil.Process(model.workers[0].pid)


def served_row(sess: Session) -> dict:
    return sess.status()["handlers"]["mlp"]["served"][0]


def test_a_code_edit_reloads_in_the_same_worker_and_answers_like_the_notebook(session, tmp_path):
    session.serve(session.add(spec(1, tmp_path)))
    before = session.status()["handlers"]["mlp"]["served"]
    edited = session.add(spec(2, tmp_path))
    session.serve(edited)
    assert session.predict("mlp", SAMPLE) == truth(2, tmp_path)
    after = session.status()["handlers"]["mlp"]["served"]
    assert [r["version"] for r in after] == [r["version"] for r in before]  # no new version
    assert after[0]["generation"] == 2 and after[0]["redeploy"] == RELOAD


def test_a_failing_init_keeps_the_old_code_and_fails_with_the_load_error(session, tmp_path):
    session.serve(session.add(spec(1, tmp_path)))
    broken = session.add(spec(2, tmp_path, init_line="    raise RuntimeError('no weights today')\n"))
    with pytest.raises(ServerError) as failed:
        session.serve(broken)
    assert "no weights today" in str(failed.value) and "Hint:" in str(failed.value)
    assert "generation 1 keeps serving" in str(failed.value)
    assert session.server().predict("mlp", SAMPLE)["tag"] == 1
    session.serve(session.add(spec(3, tmp_path)))  # the next good edit reloads
    assert session.predict("mlp", SAMPLE)["tag"] == 3


def test_a_batch_size_edit_is_a_versioned_redeploy(session, tmp_path):
    session.serve(session.add(spec(1, tmp_path)))
    session.serve(session.add(spec(2, tmp_path, batch_size=4, max_batch_delay=5)))
    row = served_row(session)
    assert row["redeploy"] == NEW_VERSION and "--batch-size" in row["why"]
    assert row["version"] != "1.0" and session.predict("mlp", SAMPLE)["tag"] == 2


def test_eight_clients_through_five_reloads_lose_nothing_and_see_no_old_code(session, tmp_path):
    session.serve(session.add(spec(0, tmp_path)))
    server, stop, lock = session.server(), threading.Event(), threading.Lock()
    served_tag, results = [0], []

    def client():
        while not stop.is_set():
            with lock:
                floor = served_tag[0]  # %ms_serve of this tag had returned when the request was sent
            try:
                results.append((floor, server.predict("mlp", SAMPLE)["tag"]))
            except Exception as err:  # a lost request is what the test counts
                results.append((floor, err))

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        for tag in range(1, 6):
            poll(lambda n=len(results): len(results) > n + 8, 30, "answers between reloads")
            session.serve(session.add(spec(tag, tmp_path)))
            with lock:
                served_tag[0] = tag
        poll(lambda n=len(results): len(results) > n + 8, 30, "answers after the last reload")
    finally:
        stop.set()
        for t in threads:
            t.join()
    lost = [r for r in results if isinstance(r[1], Exception)]
    stale = [r for r in results if not isinstance(r[1], Exception) and r[1] < r[0]]
    assert not lost and not stale, (lost[:3], stale[:3])
    assert served_row(session)["generation"] == 6


def reload_request(session: Session, secret: str) -> requests.Response:
    server = session.server()
    key = json.loads(server.layout.key_file.read_text())["inference"]["key"]
    return requests.post(
        f"{server.inference_url}/predictions/mlp/1.0",
        json={"generation": 2},
        headers={"Authorization": f"Bearer {key}", RELOAD_HEADER: secret},
        timeout=30,
    )


def test_a_reload_with_only_the_inference_key_is_refused(session, tmp_path):
    session.serve(session.add(spec(1, tmp_path)))
    known = session.reloads.models["mlp"]
    assert stat.S_IMODE((known.model_dir / SECRET_FILE).stat().st_mode) == 0o600
    (known.model_dir / "generations" / "2").mkdir(parents=True)  # even a staged generation is not loaded
    (known.model_dir / "generations" / "2" / "handler_model.py").write_text("raise SystemExit('never')\n")
    for guess in ("", "0" * 64, "wrong"):
        answer = reload_request(session, guess)
        assert answer.status_code == 403, answer.text
        assert "refused" in answer.json()["error"]
    assert session.server().predict("mlp", SAMPLE)["tag"] == 1


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another local user")
def test_another_local_user_cannot_read_the_reload_secret(session, tmp_path):
    session.serve(session.add(spec(1, tmp_path)))
    secret = session.reloads.models["mlp"].model_dir / SECRET_FILE
    code = f"import os; os.setgid(65534); os.setuid(65534); open({str(secret)!r}).read()"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert other.returncode != 0 and "PermissionError" in other.stderr


def test_a_hundred_reloads_keep_the_worker_memory_flat(session, tmp_path):
    session.serve(session.add(spec(0, tmp_path)))
    proc = worker(session.server())
    rss = []
    for tag in range(1, 101):
        session.serve(session.add(spec(tag, tmp_path)))
        if tag in (20, 100):
            rss.append(proc.memory_info().rss)
    assert worker(session.server()).pid == proc.pid  # no new process
    assert session.predict("mlp", SAMPLE)["tag"] == 100
    assert rss[1] - rss[0] < 16 * 2**20, [r / 2**20 for r in rss]  # 80 generations: no leaked generations
