"""The KServe layout is real: TorchServe started exactly as KServe's runtime starts it serves every handler, unregistered."""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from helpers import EXAMPLE, handler, poll, processes_naming, standard

from msnb.capture.notebook import load_handlers
from msnb.cli.main import main
from msnb.engines.torchserve import LocalServer
from msnb.engines.torchserve.config import parse_properties
from msnb.templates.msnb_runtime.handler.metrics import WINDOW_METRICS
from msnb.trial.runner import predict_in_process

TORCHSERVE = str(Path(sys.executable).with_name("torchserve"))
READY_TIMEOUT_S = 180


class KServeLikeTorchServe:
    """The exported layout served as KServe's runtime serves it: its config.properties (only the addresses
    and the model store path moved to loopback and this machine), its model store, token auth off, and the
    envelope KServe sets from the InferenceService's protocolVersion. A LocalServer does the process part."""

    def __init__(self, kserve_dir: Path, workdir: Path, envelope: str | None):
        props = parse_properties((kserve_dir / "config" / "config.properties").read_text())
        props.pop("model_store")  # /mnt/models/model-store in the pod; the LocalServer serves kserve_dir's
        self.server = LocalServer(
            workdir / "ts",
            auth=False,
            properties=props,
            env={"TS_SERVICE_ENVELOPE": envelope} if envelope else {},
            model_store=kserve_dir / "model-store",
        )

    def __enter__(self):
        self.server.start()
        self.url = self.server.inference_url
        return self

    def __exit__(self, *exc):
        self.server.stop()
        assert not processes_naming(self.server.workdir)

    def wait_ready(self, names: list[str]) -> None:
        for name in names:
            poll(
                lambda n=name: any(m.ready for m in self.server.client.versions(n)),
                READY_TIMEOUT_S,
                f"a READY worker for {name}",
                log=self.log,
            )

    def log(self) -> str:
        return self.server.log_tail(60)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A notebook with two handlers exported with --kserve, and their in-process answers to their examples."""
    root = tmp_path_factory.mktemp("kserve")
    nb = standard(root / "nb", handler("alpha"), handler("beta", "--version 2.0 --batch-size 2 --max-batch-delay 5"))
    assert main(["export", str(nb), "--kserve", str(root / "ks")]) == 0
    specs = [c.spec for c in load_handlers(nb)]
    expected = {s.name: (s.example, predict_in_process(s, [s.example])[0]) for s in specs}
    return root / "ks", expected


@pytest.mark.server
@pytest.mark.timeout(420)
def test_torchserve_started_like_kserve_serves_every_exported_handler_without_registration(exported, tmp_path):
    kserve_dir, expected = exported
    with KServeLikeTorchServe(kserve_dir, tmp_path, envelope=None) as ts:
        ts.wait_ready(sorted(expected))
        models = requests.get(f"{ts.server.management_url}/models", timeout=10).json()["models"]
        assert sorted(m["modelName"] for m in models) == sorted(expected)  # load_models=all + model_snapshot
        for name, (example, answer) in expected.items():
            resp = requests.post(f"{ts.url}/predictions/{name}", json=example, timeout=60)  # no token: auth is off
            assert resp.status_code == 200, resp.text
            assert resp.json() == answer
        beta = requests.get(f"{ts.server.management_url}/models/beta", timeout=10).json()[0]
        assert (beta["modelVersion"], beta["batchSize"], beta["maxBatchDelay"]) == ("2.0", 1, 5)


@pytest.mark.server
@pytest.mark.timeout(420)
def test_kserve_v1_envelope_answers_instances_with_predictions(exported, tmp_path):
    """protocolVersion v1: KServe sets TS_SERVICE_ENVELOPE=kserve, enable_envvars_config lets it through."""
    kserve_dir, expected = exported
    with KServeLikeTorchServe(kserve_dir, tmp_path, envelope="kserve") as ts:
        ts.wait_ready(sorted(expected))
        for name, (example, answer) in expected.items():
            resp = requests.post(
                f"{ts.url}/v1/models/{name}:predict", json={"instances": [example, example]}, timeout=60
            )
            assert resp.status_code == 200, resp.text + ts.log()
            assert resp.json() == {"predictions": [answer, answer]}
        # Concurrent requests to beta (--batch-size 2 in the notebook): each answered, none batched with another.
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(
                    lambda _: requests.post(
                        f"{ts.url}/v1/models/beta:predict", timeout=60, json={"instances": [expected["beta"][0]]}
                    ),
                    range(8),
                )
            )
        assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
        assert all(r.json() == {"predictions": [expected["beta"][1]]} for r in answers)


def test_kserve_dir_has_nothing_but_the_layout(exported):
    kserve_dir, expected = exported
    assert sorted(p.relative_to(kserve_dir).as_posix() for p in kserve_dir.rglob("*")) == sorted(
        ["config", "config/config.properties", "model-store", *(f"model-store/{n}.mar" for n in expected)]
    )
    assert json.loads((kserve_dir / "config" / "config.properties").read_text().split("model_snapshot=")[1])
    assert shutil.which(TORCHSERVE) or Path(TORCHSERVE).exists()


V2_BODY = """
import torch

def init_function(hidden=8):
    return Net(hidden)

def preprocess(sample):
    return torch.tensor(sample, dtype=torch.float32)  # v2: one input tensor's data, reshaped to its shape

def postprocess(output):
    return [round(float(v), 4) for v in output]
"""


@pytest.mark.server
@pytest.mark.timeout(420)
def test_kserve_v2_envelope_answers_each_input_tensor_in_its_datatype(tmp_path, capsys):
    """protocolVersion v2: TS_SERVICE_ENVELOPE=kservev2; each input tensor of a request is one sample."""
    cells = [handler("gamma", body=V2_BODY).replace(EXAMPLE, "[1, 2, 3, 4]"), handler("delta")]
    nb = standard(tmp_path / "nb", *cells)
    assert main(["export", str(nb), "--kserve", str(tmp_path / "ks")]) == 0
    warned = capsys.readouterr().err
    assert "delta: its --example (a JSON object) is not a tensor" in warned and "gamma: its" not in warned
    gamma, delta = [c.spec for c in load_handlers(nb)]
    inputs = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]]
    expected = predict_in_process(gamma, inputs)
    body = {
        "id": "req-1",
        "inputs": [{"name": f"in{i}", "shape": [4], "datatype": "FP32", "data": x} for i, x in enumerate(inputs)],
    }
    bad = {"inputs": [{"name": "short", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    as_json = {"inputs": [{"name": "input-0", "shape": [1], "datatype": "BYTES", "data": [EXAMPLE]}]}
    with KServeLikeTorchServe(tmp_path / "ks", tmp_path, envelope="kservev2") as ts:
        ts.wait_ready(["gamma", "delta"])
        post = lambda name, payload: requests.post(f"{ts.url}/v2/models/{name}/infer", json=payload, timeout=60)  # noqa: E731
        good, failed, empty, decoded = (
            post("gamma", body),
            post("gamma", bad),
            post("gamma", {"inputs": []}),
            post("delta", as_json),
        )
    assert [r.status_code for r in (good, failed, empty, decoded)] == [200] * 4, [good.text, failed.text, empty.text]
    answer = good.json()
    assert (answer["id"], answer["model_name"]) == ("req-1", "gamma")
    assert [(o["name"], o["datatype"]) for o in answer["outputs"]] == [("in0", "FP32"), ("in1", "FP32")]
    for out, want in zip(answer["outputs"], expected):
        assert out["data"] == pytest.approx(want, abs=1e-6)  # FP32 in, FP32 out
    (out,) = failed.json()["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("short", "BYTES", [1])
    assert json.loads(out["data"][0])["stage"] in ("preprocess", "inference")
    (out,) = empty.json()["outputs"]
    assert out["name"] == "error" and '"inputs" is empty' in json.loads(out["data"][0])["error"]
    (out,) = decoded.json()["outputs"]
    assert json.loads(out["data"][0]) == predict_in_process(delta, [json.loads(EXAMPLE)])[0]


@pytest.mark.server
@pytest.mark.timeout(420)
def test_kserve_v1_bad_empty_and_malformed_requests_are_200s_and_metrics_reach_prometheus(exported, tmp_path):
    """KServe's wrapper turns any non-2xx into a 500 with a Python repr: only a 200 reaches a client intact.
    And the exported config publishes msnb's metrics on the metrics port KServe scrapes."""
    kserve_dir, expected = exported
    example, answer = expected["alpha"]
    with KServeLikeTorchServe(kserve_dir, tmp_path, envelope="kserve") as ts:
        ts.wait_ready(["alpha"])
        post = lambda payload: requests.post(f"{ts.url}/v1/models/alpha:predict", json=payload, timeout=60)  # noqa: E731
        answers = {
            "one bad": post({"instances": [{"y": 1}]}),
            "bad and good": post({"instances": [{"y": 1}, example]}),
            "empty": post({"instances": []}),
            "no instances": post({"inputs": [example]}),
        }
        assert {k: r.status_code for k, r in answers.items()} == dict.fromkeys(answers, 200), ts.log()
        predictions = {k: r.json()["predictions"] for k, r in answers.items()}
        assert predictions["one bad"][0]["stage"] == "preprocess" and predictions["one bad"][0]["hint"]
        assert predictions["bad and good"][1] == answer
        assert '"instances" is empty' in predictions["empty"][0]["error"]
        assert 'no "instances"' in predictions["no instances"][0]["error"]
        found = poll(lambda: _msnb_metrics(ts.server, "alpha"), 30, "msnb metrics on /metrics", log=ts.log)
    assert set(found) == set(WINDOW_METRICS)


def _msnb_metrics(server: LocalServer, model: str) -> dict | None:
    metrics = server.client.metrics()
    found = {n: [v for labels, v in metrics.get(n, []) if labels.get("ModelName") == model] for n in WINDOW_METRICS}
    return found if all(found.values()) else None
