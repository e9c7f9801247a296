"""The KServe layout is real: TorchServe started exactly as KServe's runtime starts it serves every handler, unregistered."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests

from msnb.cli import main
from msnb.localtest import test_handler
from msnb.notebook import load_handlers
from msnb.tsconfig import free_port
from msnb.watchdog import stop_tree

from test_export import EXAMPLE, handler, standard

TORCHSERVE = str(Path(sys.executable).with_name("torchserve"))
READY_TIMEOUT_S = 180


def loopback_config(kserve_dir: Path, workdir: Path) -> tuple[Path, dict[str, int]]:
    """The exported config.properties with only its addresses moved to free loopback ports (as the issue allows)."""
    ports = {k: free_port() for k in ("inference", "metrics", "grpc_inference", "grpc_management")}
    text = (kserve_dir / "config" / "config.properties").read_text()
    text = re.sub(r"(?m)^(inference|management)_address=.*$",
                  lambda m: f"{m.group(1)}_address=http://127.0.0.1:{ports['inference']}", text)
    text = re.sub(r"(?m)^metrics_address=.*$", f"metrics_address=http://127.0.0.1:{ports['metrics']}", text)
    text = re.sub(r"(?m)^grpc_inference_port=.*$", f"grpc_inference_port={ports['grpc_inference']}", text)
    text = re.sub(r"(?m)^grpc_management_port=.*$", f"grpc_management_port={ports['grpc_management']}", text)
    text += "grpc_inference_address=127.0.0.1\ngrpc_management_address=127.0.0.1\n"
    config = workdir / "config.properties"
    config.write_text(text)
    return config, ports


class KServeLikeTorchServe:
    """`torchserve --start --model-store DIR/model-store --ts-config CONFIG`, own TMPDIR/cwd, stops only its own Java."""

    def __init__(self, kserve_dir: Path, workdir: Path, envelope: str | None):
        self.workdir = workdir
        self.config, self.ports = loopback_config(kserve_dir, workdir)
        self.url = f"http://127.0.0.1:{self.ports['inference']}"
        self.store = kserve_dir / "model-store"
        self.envelope = envelope
        self.pid: int | None = None

    def __enter__(self):
        tmp = self.workdir / "tmp"
        tmp.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TS_")}
        env.update(TMPDIR=str(tmp), LOG_LOCATION=str(self.workdir / "logs"), METRICS_LOCATION=str(self.workdir / "logs"))
        if self.envelope:  # what KServe sets from the InferenceService's protocolVersion
            env["TS_SERVICE_ENVELOPE"] = self.envelope
        with (self.workdir / "torchserve.out").open("ab") as out:  # never a pipe (FACTS.md)
            subprocess.run([TORCHSERVE, "--start", f"--model-store={self.store}", f"--ts-config={self.config}"],
                           cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                           timeout=60, check=True)
        self.pid = int(_poll(lambda: _read_pid(tmp / ".model_server.pid"), 30, "the Java pid file"))
        return self

    def __exit__(self, *exc):
        if self.pid is not None:
            stop_tree(self.pid)
            assert not psutil.pid_exists(self.pid) or psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE

    def wait_ready(self, names: list[str]) -> None:
        for name in names:
            _poll(lambda n=name: self._worker_ready(n), READY_TIMEOUT_S, f"a READY worker for {name}", self.log)

    def _worker_ready(self, name: str) -> bool:
        try:
            resp = requests.get(f"{self.url}/models/{name}", timeout=5)
        except requests.ConnectionError:
            return False
        return resp.ok and any(w["status"] == "READY" for w in resp.json()[0]["workers"])

    def log(self) -> str:
        logs = [self.workdir / "torchserve.out", self.workdir / "logs" / "model_log.log"]
        return "\n".join(p.read_text()[-3000:] for p in logs if p.exists())


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _poll(check, timeout: float, what: str, log=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{log()}")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A notebook with two handlers exported with --kserve, and their in-process answers to their examples."""
    root = tmp_path_factory.mktemp("kserve")
    nb = standard(root / "nb", handler("alpha"), handler("beta", "--version 2.0 --batch-size 2 --max-batch-delay 5"))
    assert main(["export", str(nb), "--kserve", str(root / "ks")]) == 0
    specs = [c.spec for c in load_handlers(nb)]
    expected = {s.name: (s.example, test_handler(s, [s.example])[0]) for s in specs}
    return root / "ks", expected


@pytest.mark.server
@pytest.mark.timeout(420)
def test_torchserve_started_like_kserve_serves_every_exported_handler_without_registration(exported, tmp_path):
    kserve_dir, expected = exported
    with KServeLikeTorchServe(kserve_dir, tmp_path, envelope=None) as ts:
        ts.wait_ready(sorted(expected))
        models = requests.get(f"{ts.url}/models", timeout=10).json()["models"]
        assert sorted(m["modelName"] for m in models) == sorted(expected)  # load_models=all + model_snapshot
        for name, (example, answer) in expected.items():
            resp = requests.post(f"{ts.url}/predictions/{name}", json=example, timeout=60)  # no token: auth is off
            assert resp.status_code == 200, resp.text
            assert resp.json() == answer
        beta = requests.get(f"{ts.url}/models/beta", timeout=10).json()[0]
        assert (beta["modelVersion"], beta["batchSize"], beta["maxBatchDelay"]) == ("2.0", 1, 5)


@pytest.mark.server
@pytest.mark.timeout(420)
def test_kserve_v1_envelope_answers_instances_with_predictions(exported, tmp_path):
    """protocolVersion v1: KServe sets TS_SERVICE_ENVELOPE=kserve, enable_envvars_config lets it through."""
    kserve_dir, expected = exported
    with KServeLikeTorchServe(kserve_dir, tmp_path, envelope="kserve") as ts:
        ts.wait_ready(sorted(expected))
        for name, (example, answer) in expected.items():
            resp = requests.post(f"{ts.url}/v1/models/{name}:predict", json={"instances": [example, example]},
                                 timeout=60)
            assert resp.status_code == 200, resp.text + ts.log()
            assert resp.json() == {"predictions": [answer, answer]}
        # Concurrent requests to beta (--batch-size 2 in the notebook): each answered, none batched with another.
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: requests.post(f"{ts.url}/v1/models/beta:predict", timeout=60,
                                                            json={"instances": [expected["beta"][0]]}), range(8)))
        assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
        assert all(r.json() == {"predictions": [expected["beta"][1]]} for r in answers)


def test_kserve_dir_has_nothing_but_the_layout(exported):
    kserve_dir, expected = exported
    assert sorted(p.relative_to(kserve_dir).as_posix() for p in kserve_dir.rglob("*")) == sorted(
        ["config", "config/config.properties", "model-store", *(f"model-store/{n}.mar" for n in expected)])
    assert json.loads((kserve_dir / "config" / "config.properties").read_text().split("model_snapshot=")[1])
    assert shutil.which(TORCHSERVE) or Path(TORCHSERVE).exists()


V2_BODY = '''
import torch

def init_function(hidden=8):
    return Net(hidden)

def preprocess(sample):
    return torch.tensor(sample, dtype=torch.float32)  # v2: one input tensor's data, reshaped to its shape

def postprocess(output):
    return [round(float(v), 4) for v in output]
'''


@pytest.mark.server
@pytest.mark.timeout(420)
def test_kserve_v2_envelope_answers_each_input_tensor(tmp_path):
    """protocolVersion v2: TS_SERVICE_ENVELOPE=kservev2; each input tensor of a request is one sample."""
    nb = standard(tmp_path / "nb", handler("gamma", body=V2_BODY).replace(EXAMPLE, "[1, 2, 3, 4]"))
    assert main(["export", str(nb), "--kserve", str(tmp_path / "ks")]) == 0
    (spec,) = [c.spec for c in load_handlers(nb)]
    inputs = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]]
    expected = test_handler(spec, inputs)
    body = {"id": "req-1", "inputs": [{"name": f"in{i}", "shape": [4], "datatype": "FP32", "data": x}
                                      for i, x in enumerate(inputs)]}
    with KServeLikeTorchServe(tmp_path / "ks", tmp_path, envelope="kservev2") as ts:
        ts.wait_ready(["gamma"])
        resp = requests.post(f"{ts.url}/v2/models/gamma/infer", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert (answer["id"], answer["model_name"]) == ("req-1", "gamma")
    assert [o["name"] for o in answer["outputs"]] == ["in0", "in1"]
    assert [o["data"] for o in answer["outputs"]] == expected
