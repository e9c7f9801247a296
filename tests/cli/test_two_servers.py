"""Two `msnb serve` in two project folders: each `msnb predict` reaches its own, and says which one answered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import EXAMPLE, NET, poll, standard

from msnb.cli.main import main

MSNB = str(Path(sys.executable).with_name("msnb"))


def project(folder: Path, seed: int) -> dict:
    """A project with the standard notebook, Net's weights from ``seed``, exported into folder/store; returns the
    notebook's own computation on EXAMPLE (plain torch on those weights, then the cell's postprocess)."""
    nb = standard(folder)
    torch.manual_seed(seed)
    namespace: dict = {"torch": torch}
    exec(NET, namespace)
    net = namespace["Net"]()
    torch.save(net.state_dict(), folder / "weights.pt")
    assert main(["export", str(nb), "-o", str(folder / "store")]) == 0
    with torch.no_grad():
        out = net(torch.tensor(json.loads(EXAMPLE)["x"], dtype=torch.float32))
    return {"label": int(out.argmax()), "scores": [round(float(v), 4) for v in out]}


def serve(folder: Path, env: dict) -> subprocess.Popen:
    log = (folder / "serve.out").open("w")
    return subprocess.Popen([MSNB, "serve", "store"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder)


def served_log(folder: Path) -> str:
    return f"--- serve.out in {folder.name}:\n{(folder / 'serve.out').read_text()[-3000:]}"


def predict(cwd: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    argv = [MSNB, "predict", "mlp", "--data", EXAMPLE, *extra]
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.server
@pytest.mark.timeout(600)
def test_two_servers_in_two_projects_each_predict_reaches_its_own(tmp_path, capsys):
    a, b, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "elsewhere"
    expected = {}
    for folder, seed in ((a, 3), (b, 7)):
        expected[folder] = project(folder, seed)
    assert expected[a] != expected[b], "the two projects answer differently"
    elsewhere.mkdir()
    short = Path(os.environ.get("TMPDIR", "/tmp"))
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(short)}
    procs = {a: serve(a, env), b: serve(b, env)}
    try:
        states = {f: tmp_path / "state" / "servers" / f"{p.pid}.json" for f, p in procs.items()}
        poll(lambda: all(s.exists() for s in states.values()), 240, interval=0.2)
        for folder in (a, b):
            assert procs[folder].poll() is None, f"`msnb serve` in {folder} exited:\n{served_log(folder)}"
            done = predict(folder, env)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == expected[folder], f"{done.stderr}\n{served_log(a)}\n{served_log(b)}"
            assert f"answered by `msnb serve` pid {procs[folder].pid} in {folder}" in done.stderr
        asked = predict(elsewhere, env)
        assert asked.returncode == 2 and "2 `msnb serve` are running" in asked.stderr and "--server PID" in asked.stderr
        picked = predict(elsewhere, env, "--server", str(procs[b].pid))
        assert picked.returncode == 0 and json.loads(picked.stdout) == expected[b], picked.stderr
        procs[b].send_signal(signal.SIGINT)
        assert procs[b].wait(timeout=60) == 0
        after = predict(a, env)
        assert after.returncode == 0 and json.loads(after.stdout) == expected[a], "A still answers after B stopped"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=60)
