"""Many archives in one Ray replica (a replica set, the runtime's ray.multi_model) on the kernel's Ray: two archives made
by torch-model-archiver that each ship a ``model.py``, a ``handler.py`` and a package of the same name answer from one
process as a plain TorchServe answers them, beside an archive whose initialize raises (it fails alone, with its
error); an archive registered through TorchServe's management API loads into the running replica; one scaled through
it moves to a set of its size and back; and three archives in a set whose replica keeps one loaded answer concurrent
requests, each evicted and loaded again, none lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import torch
import ts_archives
from helpers import TS_EAGER_HANDLER, TS_EAGER_MODEL, poll

from msnb.cli.serve_archives import deploy_archives, opener, started_models
from msnb.engines import compare
from msnb.engines.ray.engine import LocalRay
from msnb.engines.ray.packing import SET_PREFIX
from msnb.engines.ray.ts_start import TorchServeApi
from msnb.engines.torchserve import LocalServer
from msnb.engines.ts_properties import read
from msnb.templates.msnb_runtime.ray.multi_model_routes import LOADED_PATH, set_route

# One handler text for both archives: what it answers comes from the archive's own model.py and package.
CLASHING = textwrap.dedent("""
    import os

    import model
    from clash_pkg import tag


    def handle(data, context):
        if data is None:
            return None
        import model as late  # at request time too, as some TorchServe handlers import

        out = []
        for row in data:
            body = row.get("body") or {}
            answer = {"value": model.VALUE * body.get("x", 1), "late": late.VALUE, "tag": tag.NAME}
            out.append({"pid": os.getpid()} if body.get("pid") else answer)
        return out
""")
REQUESTS = [
    {"model": "ca", "body": {"x": 3}},
    {"model": "cb", "body": {"x": 3}},
    {"model": "ca", "path": "describe"},
]


def clashing(root: Path, name: str, value: int) -> Path:
    """An archive with model.py (VALUE), handler.py and a package clash_pkg (its tag) of its own."""
    folder = root / name
    (folder / "extra" / "clash_pkg").mkdir(parents=True)
    (folder / "model.py").write_text(f"VALUE = {value}\n")
    (folder / "handler.py").write_text(CLASHING)
    (folder / "extra" / "clash_pkg" / "__init__.py").write_text("")
    (folder / "extra" / "clash_pkg" / "tag.py").write_text(f"NAME = {name!r}\n")
    extra = ("--model-file", str(folder / "model.py"), "--extra-files", str(folder / "extra"))
    command = ts_archives.archiver(folder, name, str(folder / "handler.py"), *extra)
    subprocess.run(command, check=True, capture_output=True, timeout=180, env={**os.environ, "TMPDIR": str(folder)})
    return folder / f"{name}.mar"


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clash")
    built = {name: clashing(root, name, value) for name, value in (("ca", 2), ("cb", 5))}
    return built | ts_archives.build_all(root / "ts", ("broken",))


def sets(engine) -> set[str]:
    from ray import serve

    return {name for name in serve.status().applications if name.startswith(SET_PREFIX)}


def pid(engine, name: str) -> int:
    return engine.predict(name, {"pid": True})["pid"]


def two_pids(engine, name: str) -> set[int] | None:
    """The two replica processes that answer ten requests of ``name`` (None: fewer answered)."""
    answered = {pid(engine, name) for _ in range(10)}
    return answered if len(answered) == 2 else None


@pytest.mark.timeout(900)
def test_archives_with_clashing_module_names_share_a_replica_and_answer_as_on_plain_torchserve(
    ray_engine, archives, tmp_path, capsys
):
    served = deploy_archives(ray_engine, [archives["ca"], archives["cb"], archives["broken"]])
    out, err = capsys.readouterr()
    assert served == ["ca", "cb"], err
    assert "broken.mar: broken did not load on Ray" in err and "user error 42: weights do not match" in err
    assert "Hint:" in err and "serving ca 1.0" in out and "serving cb 1.0" in out
    assert len(sets(ray_engine)) == 1 and pid(ray_engine, "ca") == pid(ray_engine, "cb")  # one process holds both

    with LocalServer(tmp_path / "ts") as torchserve:
        for name in ("ca", "cb"):
            torchserve.register(archives[name])
        lines = [compare.parse_request(json.dumps(r), n, ["ca", "cb"], tmp_path) for n, r in enumerate(REQUESTS, 1)]
        rows = compare.compare(torchserve, ray_engine, lines)
    assert [diff for *_, diff in rows] == [None] * len(REQUESTS), compare.table(rows)
    answers = [json.loads(a.body) for _, a, _, _ in rows[:2]]
    assert answers == [{"value": 6, "late": 2, "tag": "ca"}, {"value": 15, "late": 5, "tag": "cb"}]


def management(engine, archives: dict[str, Path], tmp_path: Path, load_models: str) -> TorchServeApi:
    """TorchServe's management API on ``engine`` over a store of ca and cb, loading ``load_models`` at start."""
    store = tmp_path / "store"
    store.mkdir()
    for name in ("ca", "cb"):
        shutil.copy(archives[name], store / f"{name}.mar")
    config = read(ts_archives.config_file(tmp_path / "conf", store, engine.http_port, load_models=load_models))
    return TorchServeApi(engine, config, opener(config))


@pytest.mark.timeout(900)
def test_an_archive_registered_through_the_management_api_loads_into_the_running_replica(
    ray_engine, archives, tmp_path
):
    api = management(ray_engine, archives, tmp_path, "ca.mar")
    try:
        assert started_models(ray_engine, api, [], None, None) == ["ca"]
        before, running = sets(ray_engine), pid(ray_engine, "ca")
        key = json.loads(Path(ray_engine.key_file).read_text())["management"]["key"]
        auth = {"Authorization": f"Bearer {key}"}
        params = {"url": "cb.mar", "synchronous": "true"}
        answer = requests.post(f"{api.management_url}/models", params=params, headers=auth, timeout=600)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"status": 'Model "cb" Version: 1.0 registered with 1 initial workers'}
        assert ray_engine.predict("cb", {"x": 2}) == {"value": 10, "late": 5, "tag": "cb"}
        assert pid(ray_engine, "cb") == running and sets(ray_engine) == before  # no new replica, no new application
        gone = requests.delete(f"{api.management_url}/models/cb", headers=auth, timeout=600)
        assert gone.status_code == 200, gone.text
        key = json.loads(Path(ray_engine.key_file).read_text())["inference"]["key"]
        url = f"{ray_engine.inference_url}/predictions/cb"
        missing = requests.post(url, json={"x": 1}, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert (missing.status_code, missing.json()["type"]) == (404, "ModelNotFoundException")
        assert ray_engine.predict("ca", {"x": 1}) == {"value": 2, "late": 2, "tag": "ca"}
        assert pid(ray_engine, "ca") == running
    finally:
        api.stop()


@pytest.mark.timeout(900)
def test_a_packed_model_scaled_through_the_management_api_gets_a_set_of_its_workers_and_comes_back(
    ray_engine, archives, tmp_path
):
    """TorchServe's ``PUT /models/NAME?min_worker=2``: the model leaves its set for one whose replicas are as many
    (its old set's other model keeps its process), answers from both replicas, and joins its old set again at 1."""
    api = management(ray_engine, archives, tmp_path, "ca.mar,cb.mar")
    key = json.loads(Path(ray_engine.key_file).read_text())["management"]["key"]
    auth = {"Authorization": f"Bearer {key}"}

    def scale(workers: int) -> None:
        params = {"min_worker": workers, "max_worker": workers, "synchronous": "true"}
        answer = requests.put(f"{api.management_url}/models/cb", params=params, headers=auth, timeout=600)
        assert answer.status_code == 200, answer.text

    try:
        assert sorted(started_models(ray_engine, api, [], None, None)) == ["ca", "cb"]
        shared, running = ray_engine.sets.status_app("ca"), pid(ray_engine, "ca")
        assert ray_engine.sets.status_app("cb") == shared
        scale(2)
        own = ray_engine.sets.status_app("cb")
        assert own not in (None, shared) and len(ray_engine.status("cb").workers) == 2
        both = poll(lambda: two_pids(ray_engine, "cb"), 120, "cb answered by its two replicas")
        assert running not in both and ray_engine.predict("cb", {"x": 2}) == {"value": 10, "late": 5, "tag": "cb"}
        assert pid(ray_engine, "ca") == running and ray_engine.predict("ca", {"x": 1})["value"] == 2
        scale(1)
        assert ray_engine.sets.status_app("cb") == shared and pid(ray_engine, "cb") == running
        assert own not in sets(ray_engine)  # the set it left, emptied, is gone
    finally:
        api.stop()


def eager(root: Path, name: str, seed: int) -> tuple[Path, torch.nn.Module]:
    """A BaseHandler eager-mode archive (its own model.py and weights seeded with ``seed``) and its network."""
    folder = root / name
    folder.mkdir()
    (folder / "model.py").write_text(TS_EAGER_MODEL)
    namespace: dict = {}
    exec(TS_EAGER_MODEL, namespace)
    torch.manual_seed(seed)
    net = namespace["TinyNet"]().eval()
    torch.save(net.state_dict(), folder / "w.pt")
    (folder / "handler.py").write_text(TS_EAGER_HANDLER)
    files = ("--model-file", str(folder / "model.py"), "--serialized-file", str(folder / "w.pt"))
    command = ts_archives.archiver(folder, name, str(folder / "handler.py"), *files)
    subprocess.run(command, check=True, capture_output=True, timeout=180, env={**os.environ, "TMPDIR": str(folder)})
    return folder / f"{name}.mar", net


def torch_answer(net: torch.nn.Module, x: list[float]) -> list[float]:
    """Plain torch on the archive's weights, rounded as its handler's postprocess rounds."""
    with torch.inference_mode():
        return [round(v, 4) for v in net(torch.tensor([x], dtype=torch.float32))[0].tolist()]


@pytest.mark.timeout(900)
def test_a_set_that_keeps_one_model_loaded_answers_every_concurrent_request_as_plain_torch(tmp_path):
    built = {name: eager(tmp_path, name, seed) for name, seed in (("e1", 1), ("e2", 2), ("e3", 3))}
    engine = LocalRay(models_per_replica=3, loaded_per_replica=1).start()
    try:
        assert deploy_archives(engine, [mar for mar, _ in built.values()]) == ["e1", "e2", "e3"]
        set_app = engine.sets.status_app("e1")
        assert {engine.sets.status_app(n) for n in built} == {set_app}  # one set, one replica, one model loaded
        # bursts of each model in turn, six clients at once: a model goes idle (evicted) while another answers
        asked = [(name, [float(n), 1.0, -2.0, 0.5 * k]) for n in range(3) for name in built for k in range(6)]
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda ask: engine.predict(ask[0], {"x": ask[1]}), asked))
        assert answers == [torch_answer(built[name][1], x) for name, x in asked]  # none lost, each its own weights
        url = f"{engine.inference_url}{set_route(set_app)}{LOADED_PATH}"

        def loaded() -> dict:
            return engine.client.call("GET", url, "inference").json()

        assert all(loaded()[name]["loads"] >= 2 for name in built)  # each evicted and loaded again at least once
        poll(lambda: sum(entry["resident"] for entry in loaded().values()) == 1, 60, "the set to keep one loaded")
    finally:
        engine.stop()
