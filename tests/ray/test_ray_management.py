"""A TorchServe team's management calls, sent to a plain TorchServe started from their config.properties and to the
Ray engine started from the same file: every call's status and the body a script reads are the same — list (paged),
describe (customized too), register from the store (a name of its own, workers, batching), scale, set-default,
unregister — and so are the refusals: a missing or corrupt archive, a name already registered, a model or version
that does not exist, a wrong key, the model API disabled."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import ts_archives
from helpers import poll, run
from plain_ts import PlainServer
from plain_ts import key_of as _key
from prometheus_client.parser import text_string_to_metric_families

import msnb.cli.main
import msnb.engines.ray.engine
import msnb.engines.ray.shared  # imported before a test stands the shared Ray in for LocalRay: it subclasses LocalRay
from msnb.cli.serve_archives import opener, started_models
from msnb.engines.ray.management import Management
from msnb.engines.ray.nodes import free_port
from msnb.engines.ray.ts_start import TorchServeApi
from msnb.engines.ts_properties import read

# The calls of a deploy script, in order: (method, path, query).
CALLS = [
    ("GET", "/models", {}),
    ("POST", "/models", {"url": "klass.mar", "initial_workers": "1", "synchronous": "true"}),
    ("POST", "/models", {"url": "klass.mar", "initial_workers": "1", "synchronous": "true"}),  # 409
    (
        "POST",
        "/models",
        {
            "url": "desc.mar",
            "model_name": "d2",
            "initial_workers": "1",
            "batch_size": "2",
            "max_batch_delay": "50",
            "response_timeout": "30",
            "synchronous": "true",
        },
    ),
    ("POST", "/models", {"url": "missing.mar"}),  # 404
    ("POST", "/models", {"url": "corrupt.mar"}),  # 400
    ("POST", "/models", {}),  # 400: no url
    ("GET", "/models", {}),
    ("GET", "/models", {"limit": "1"}),
    ("GET", "/models", {"limit": "1", "next_page_token": "1"}),
    ("GET", "/models/named", {}),
    ("GET", "/models/d2", {"customized": "true"}),
    ("PUT", "/models/klass", {"min_worker": "2", "synchronous": "true"}),
    ("GET", "/models/klass", {}),
    ("PUT", "/models/nope", {"min_worker": "2"}),  # 404
    ("PUT", "/models/klass/9.9", {"min_worker": "2"}),  # 404
    ("GET", "/models/nope", {}),  # 404
    ("GET", "/models/klass/9.9", {}),  # 404
    ("PUT", "/models/klass/1.0/set-default", {}),
    ("PUT", "/models/klass/9.9/set-default", {}),  # 404
    ("DELETE", "/models/klass/9.9", {}),  # 404
    ("DELETE", "/models/klass/1.0", {}),
    ("DELETE", "/models/nope", {}),  # 404
    ("DELETE", "/models/d2", {}),
    ("GET", "/models", {}),
]
PREDICTIONS = 3
# TorchServe's counters, as prometheus_client's parser names their samples (a counter's sample ends in _total)
TS_METRICS = ("ts_inference_requests_total", "ts_inference_latency_microseconds_total")
NO_QUEUE_TIME = "ts_queue_latency_microseconds_total"  # Ray keeps no queue time per model (docs/ray-management.md)
# What a script reads of a describe answer (worker ids, pids and start times are each server's own).
READ = (
    "modelName",
    "modelVersion",
    "modelUrl",
    "minWorkers",
    "maxWorkers",
    "batchSize",
    "maxBatchDelay",
    "responseTimeout",
    "loadedAtStartup",
    "customizedMetadata",
)


def call(url: str, key: str, method: str, path: str, query: dict) -> tuple[int, object]:
    resp = requests.request(method, url + path, params=query, headers={"Authorization": f"Bearer {key}"}, timeout=600)
    return resp.status_code, resp.json()


def for_torchserve(config: Path) -> Path:
    """The same file for TorchServe itself beside the Ray engine on one machine: its three addresses on ports of its
    own, and its gRPC ports (free ones: its defaults may be taken here)."""
    lines = [line for line in config.read_text().splitlines() if not line.split("=")[0].endswith("_address")]
    lines += [f"{kind}_address=http://127.0.0.1:{free_port()}" for kind in ("inference", "management", "metrics")]
    lines += [f"grpc_inference_port={free_port()}", f"grpc_management_port={free_port()}"]
    path = config.with_name("torchserve.properties")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mstore")
    built = ts_archives.build_all(root / "built", ("named", "klass", "desc"))
    (root / "store").mkdir()
    for mar in built.values():
        shutil.copy(mar, root / "store" / mar.name)
    (root / "store" / "corrupt.mar").write_bytes(b"not a zip archive")
    loading = root / "loading" / "loading_handler.py"  # a handler whose initialize takes seconds
    loading.parent.mkdir()
    loading.write_text(LOADING)
    subprocess.run(ts_archives.archiver(loading.parent, "loading", str(loading)), check=True, capture_output=True)
    shutil.copy(loading.parent / "loading.mar", root / "store" / "loading.mar")
    return root / "store"


LOADING = (
    "import time\n\ndef handle(data, context):\n    if data is None:\n        time.sleep(5)\n        return None\n"
)
LOADING += '    return [{"loaded": True} for _ in data]\n'


def comparable(status: int, body: object) -> object:
    """What a script reads of an answer: a describe's fields in READ and its workers' count and statuses."""
    if isinstance(body, list):
        return status, [
            {**{k: m.get(k) for k in READ}, "workers": [w["status"] for w in m["workers"]], "keys": sorted(m)}
            for m in body
        ]
    return status, body


@pytest.mark.timeout(1200)
def test_a_deploy_scripts_management_calls_answer_on_ray_as_on_plain_torchserve(ray_engine, store, tmp_path):
    config = ts_archives.config_file(tmp_path / "conf", store, ray_engine.http_port)
    plain = PlainServer.from_config(for_torchserve(config), tmp_path / "ts").start()
    api = TorchServeApi(ray_engine, read(config), opener(read(config)))
    try:
        assert started_models(ray_engine, api, [], None, None) == ["named"]  # `msnb serve`'s start: load_models
        poll(lambda: _ready(plain), 300, "the plain TorchServe's named worker to be ready", interval=0.5)
        ray_key = json.loads(Path(ray_engine.key_file).read_text())["management"]["key"]
        for method, path, query in CALLS:
            truth = comparable(*call(plain.management_url, plain.key("management"), method, path, query))
            ours = comparable(*call(api.management_url, ray_key, method, path, query))
            if query.get("url") == "corrupt.mar":  # msnb words it (with its Hint); TorchServe's status and type
                assert ours[0] == truth[0] and ours[1]["type"] == truth[1]["type"], ours
                assert "not a readable model archive" in ours[1]["message"] and "Hint:" in ours[1]["message"]
                continue
            assert ours == truth, (method, path, query)
        wrong = (call(u, "wrong-key", "GET", "/models", {}) for u in (plain.management_url, api.management_url))
        assert next(wrong) == next(wrong)
        truth = metrics_after(plain.inference_url, plain.key("inference"), plain.metrics_url, lambda got: True)
        # counters are cumulative, as TorchServe's are: an earlier `named` on the shared Ray (another test's) counts too
        before = requests_counted(api.metrics_url)
        ours = metrics_after(
            ray_engine.inference_url,
            _key(ray_engine.key_file, "inference"),
            api.metrics_url,
            lambda got: requests_counted(got) == before + PREDICTIONS,
        )
        assert set(truth) - {NO_QUEUE_TIME} == set(ours) and set(ours) >= set(TS_METRICS), (truth, ours)
        assert truth["ts_inference_requests_total"]["named"] == PREDICTIONS == requests_counted(ours) - before
        assert ours["ts_inference_latency_microseconds_total"]["named"] > 0
    finally:
        api.stop()
        plain.stop()


@pytest.mark.timeout(600)
def test_a_prediction_right_after_a_register_without_waiting_waits_for_its_workers_as_on_torchserve(
    ray_engine, store, tmp_path
):
    # TorchServe's synchronous=false: the model is registered at once and a prediction queued for its workers; on
    # Ray the router holds it until the model's replicas answer (it never reaches Serve before its application does).
    config = ts_archives.config_file(tmp_path / "conf", store, ray_engine.http_port, load_models="")
    plain = PlainServer.from_config(for_torchserve(config), tmp_path / "ts").start()
    api = TorchServeApi(ray_engine, read(config), opener(read(config)))
    register = {"url": "loading.mar", "initial_workers": "1", "synchronous": "false"}
    ray_key = json.loads(Path(ray_engine.key_file).read_text())["management"]["key"]
    answers = {}
    try:
        poll(lambda: _answers(plain), 300, "the plain TorchServe's management API", interval=0.5)
        for name, management, key, inference, inference_key in (
            ("torchserve", plain.management_url, plain.key("management"), plain.inference_url, plain.key("inference")),
            ("ray", api.management_url, ray_key, ray_engine.inference_url, _key(ray_engine.key_file, "inference")),
        ):
            registered = call(management, key, "POST", "/models", register)
            predicted = requests.post(
                f"{inference}/predictions/loading",
                json={"x": [1]},
                headers={"Authorization": f"Bearer {inference_key}"},
                timeout=300,
            )
            answers[name] = (registered[0], predicted.status_code, predicted.json())
    finally:
        api.stop()
        plain.stop()
    assert answers["ray"] == answers["torchserve"] == (202, 200, {"loaded": True}), answers


def metrics_after(inference_url: str, key: str, metrics_url: str, settled) -> dict[str, dict[str, float]]:
    """PREDICTIONS answers of ``named``, then the metrics address scraped (until ``settled``: Ray exports them every
    second or so) and parsed by prometheus_client's parser: TorchServe's ts_ families, model name -> value, and
    their label names as TorchServe writes them."""
    for n in range(PREDICTIONS):
        resp = requests.post(
            f"{inference_url}/predictions/named",
            json={"x": [n, 1.0, 2.0]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
        assert resp.status_code == 200, resp.text
    got: dict = {}

    def scraped() -> bool:
        got.clear()
        text = requests.get(f"{metrics_url}/metrics", timeout=30).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("ts_"):
                    assert set(sample.labels) == {"model_name", "model_version", "hostname"}, sample
                    got.setdefault(sample.name, {})[sample.labels["model_name"]] = sample.value
        return settled(got)

    poll(scraped, 240, "the predictions counted on the metrics address", interval=1)
    return got


def requests_counted(scraped: dict | str) -> float:
    """``named``'s ts_inference_requests_total in a scrape (``metrics_after``'s dict), or scraped now from a URL."""
    if isinstance(scraped, str):
        text = requests.get(f"{scraped}/metrics", timeout=30).text
        scraped = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                scraped.setdefault(sample.name, {})[sample.labels.get("model_name")] = sample.value
    return scraped.get("ts_inference_requests_total", {}).get("named", 0)


def _ready(plain: PlainServer, name: str = "named") -> bool:
    try:
        status, body = call(plain.management_url, plain.key("management"), "GET", f"/models/{name}", {})
    except (requests.ConnectionError, OSError, ValueError):  # not listening yet, or its key file not written yet
        return False
    return status == 200 and [w["status"] for w in body[0]["workers"]] == ["READY"]


@pytest.mark.timeout(300)
def test_register_and_unregister_with_the_model_api_disabled_are_refused_as_torchserve_refuses_them(store, tmp_path):
    config = ts_archives.config_file(tmp_path / "conf", store, free_port(), enable_model_api="false", load_models="")
    plain = PlainServer.from_config(for_torchserve(config), tmp_path / "ts").start()
    ours = Management(registry=None, model_api=False, key=None)
    try:
        poll(lambda: _answers(plain), 120, "the plain TorchServe's management API", interval=0.5)
        for method, path, query in [("POST", "/models", {"url": "klass.mar"}), ("DELETE", "/models/named", {})]:
            assert ours.answer(method, path, query, "") == call(
                plain.management_url, plain.key("management"), method, path, query
            )
    finally:
        plain.stop()


def _answers(plain: PlainServer) -> bool:
    try:
        return call(plain.management_url, plain.key("management"), "GET", "/models", {})[0] == 200
    except (requests.ConnectionError, OSError, ValueError):  # not up yet, or its key file half written
        return False


@pytest.mark.timeout(600)
def test_msnb_serve_takes_torchserves_start_options_and_prints_the_management_address(
    ray_engine, store, tmp_path, capsys, monkeypatch
):
    # the shared Ray stands for the one `msnb serve` would start (a Ray start of its own is test_ray_serve_cli's)
    monkeypatch.setattr(msnb.engines.ray.engine, "LocalRay", lambda *args, **kwargs: ray_engine)
    monkeypatch.setattr(ray_engine, "start", lambda: ray_engine)
    monkeypatch.setattr(ray_engine, "stop", lambda: None)
    config = ts_archives.config_file(tmp_path / "conf", store, ray_engine.http_port, load_models="")
    seen: dict = {}

    def wait(engine) -> bool:  # while `msnb serve` runs: what a script on the management address sees
        seen["out"] = capsys.readouterr().out
        url = re.search(r"management (http://\S+)", seen["out"]).group(1)
        seen["models"] = call(url, _key(engine.key_file, "management"), "GET", "/models", {})
        return True  # Ctrl-C

    monkeypatch.setattr(msnb.cli.main, "_wait", wait)
    argv = ["serve", "--engine", "ray", "--ts-config", config, "--model-store", store, "--models", "k=klass.mar"]
    code, out, err = run(capsys, *argv, "--state", tmp_path / "state.json")
    assert code == 0, err
    assert "serving k: POST" in seen["out"] and re.search(r"metrics http://127\.0\.0\.1:\d+", seen["out"])
    assert seen["models"] == (200, {"models": [{"modelName": "k", "modelUrl": "klass.mar"}]})
    assert "Ray Serve stopped" in out


# The management reads a script sends to an exported application's router (its writes are the RayService's).
EXPORTED = ("klass", "desc")
EXPORT_READS = [
    ("/models", {}),
    ("/models", {"limit": "1"}),
    ("/models", {"limit": "1", "next_page_token": "1"}),
    ("/models/klass", {}),
    ("/models/klass/1.0", {}),
    ("/models/desc", {"customized": "true"}),
    ("/models/nope", {}),  # 404
    ("/models/klass/9.9", {}),  # 404
]


@pytest.mark.timeout(900)
def test_an_exported_routers_list_and_describe_answer_as_plain_torchserve_serving_the_same_archives(
    ray_engine, store, tmp_path
):
    from msnb.session.export import write_ray_archives

    outdir = write_ray_archives([store / f"{n}.mar" for n in EXPORTED], tmp_path / "out")
    config = ts_archives.config_file(
        tmp_path / "conf", store, free_port(), load_models=",".join(f"{n}.mar" for n in EXPORTED)
    )
    plain = PlainServer.from_config(for_torchserve(config), tmp_path / "ts").start()
    try:
        router = Router("exported-router")
        deploy_export(outdir, router.name)
        poll(lambda: all(_ready(plain, n) for n in EXPORTED), 300, "the plain TorchServe's workers", interval=0.5)
        poll(lambda: served_export(router), 600, "the exported applications' replicas", interval=1)
        for path, query in EXPORT_READS:
            truth = comparable(*call(plain.management_url, plain.key("management"), "GET", path, query))
            assert router.ask(path, query) == truth, (path, query)
    finally:
        plain.stop()
        router.loop.close()


def deploy_export(outdir: Path, router_name: str):
    """The export's applications on the shared Ray as its serve_config.yaml declares them, each replica with the
    exported folder on their path (as `serve run` from the folder gives it), and the export's router under a name
    of its own and no route (the shared Ray's router holds ``/``)."""
    import importlib

    from ray import serve

    sys.path.insert(0, str(outdir))
    try:  # the export's own modules, not msnb.templates': the replicas import them from the folder
        exported = importlib.import_module("msnb_runtime.ray.app")
        here = {"runtime_env": {"env_vars": {"PYTHONPATH": str(outdir)}}}  # a local working_dir: Serve refuses it
        targets = []
        for name in EXPORTED:
            options = exported.deployment_options(exported.read_folder(outdir / name)[1], [], 0.1)
            options["ray_actor_options"].update(here)
            app = exported.MsnbModel.options(**options).bind(name, None, {}, None, None, [])
            targets.append(serve.RunTarget(app, name=name, route_prefix=None))
        router = exported.MsnbRouter.options(ray_actor_options={"num_cpus": 0, **here}).bind({"auth": False})
        targets.append(serve.RunTarget(router, name=router_name, route_prefix=None))
        serve.run_many(targets, wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
    finally:  # this process keeps none of them
        sys.path.remove(str(outdir))
        for name in [n for n, m in sys.modules.items() if str(getattr(m, "__file__", "")).startswith(str(outdir))]:
            sys.modules.pop(name)


def served_export(router: Router) -> bool:
    """Whether every exported model answers its describe with a replica running."""
    from ray.serve.exceptions import RayServeException

    try:
        return all(router.ask(f"/models/{n}", {})[1][0]["workers"][:1] == ["READY"] for n in EXPORTED)
    except (KeyError, IndexError, TypeError, TimeoutError, RayServeException):  # not deployed yet: 404, or none
        return False


class Router:
    """Application ``name``'s answers to ``GET path?query`` (after its key check, see tests/unit/templates), through
    a handle in an event loop of the test's own (the shared Ray's handles run in their caller's loop, the first)."""

    def __init__(self, name: str):
        self.name, self.loop = name, asyncio.new_event_loop()

    def ask(self, path: str, query: dict) -> tuple[int, object]:
        from ray import serve

        async def asked() -> tuple:
            parts = [p for p in path.split("/") if p]
            return await asyncio.wait_for(serve.get_app_handle(self.name).manage.remote("GET", parts, query, {}), 300)

        status, _, body = self.loop.run_until_complete(asked())
        return comparable(status, json.loads(body))


@pytest.mark.timeout(600)
def test_addresses_on_every_interface_listen_there_and_still_ask_for_the_key(ray_engine, store, tmp_path):
    """config.properties' ``http://0.0.0.0:PORT`` with the key on: the front and the management API listen on every
    interface and answer a client on loopback with the key, and refuse it without, as TorchServe does."""
    import psutil

    from msnb.engines.ray import ingress
    from msnb.package.model_folder import ModelFolder

    inference, management = free_port(), free_port()
    config = read(
        ts_archives.config_file(
            tmp_path / "conf",
            store,
            inference,
            load_models="",
            management_address=f"http://0.0.0.0:{management}",
            allowed_hosts="models.example.com",
        )
    )
    ray_engine.redeploy(ModelFolder.open(store / "klass.mar", ray_engine.store.root).path)
    # a front of the engine's kind on 0.0.0.0, whose way to the router is the engine's own front
    front = ingress.spawn(
        inference,
        ray_engine.http_port,
        ray_engine.max_request_size,
        ray_engine.key_file,
        tmp_path / "front.log",
        60,
        "0.0.0.0",
    )
    api = TorchServeApi(ray_engine, config, opener(config))
    try:
        bound = {
            (c.laddr.ip, c.laddr.port)
            for pid in (front.pid, os.getpid())
            for c in psutil.Process(pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        }
        assert {("0.0.0.0", inference), ("0.0.0.0", management)} <= bound
        url, key = f"http://127.0.0.1:{inference}/predictions/klass", _key(ray_engine.key_file, "inference")
        answer = poll(lambda: _predicted(url, key), 120, "klass's answer through the front on 0.0.0.0", interval=0.5)
        assert answer == {"y": [3.0, 6.0], "batch_size": 4}  # the handler's factor 3, its model-config's batch
        refused = requests.post(url, json={"x": [1.0, 2.0]}, timeout=60)
        assert (refused.status_code, refused.json()["type"]) == (400, "InvalidKeyException"), refused.text
        assert api.management_url == f"http://127.0.0.1:{management}"
        models = call(api.management_url, _key(ray_engine.key_file, "management"), "GET", "/models", {})
        assert models == (200, {"models": []})  # this API's own registry: nothing registered through it
        assert call(api.management_url, "wrong-key", "GET", "/models", {})[1]["type"] == "InvalidKeyException"
        # off loopback: the allowed host is answered, another host or a foreign web page refused (api.hosts)
        headers = {"Authorization": f"Bearer {_key(ray_engine.key_file, 'management')}"}
        named = requests.get(
            f"{api.management_url}/models", headers={**headers, "Host": "models.example.com"}, timeout=60
        )
        assert named.status_code == 200, named.text
        for foreign in ({"Host": "evil.example.com"}, {"Origin": "http://evil.example.com"}):
            for where in (f"{api.management_url}/models", url):
                refused = requests.get(where, headers={**headers, **foreign}, timeout=60)
                assert refused.status_code == 403 and "Hint:" in refused.json()["message"], (where, refused.text)
        assert "0.0.0.0" in api.hosts_note and "models.example.com" in api.hosts_note
    finally:
        api.stop()
        ingress.stop(front)


def _predicted(url: str, key: str) -> object:
    resp = requests.post(url, json={"x": [1.0, 2.0]}, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return resp.json() if resp.status_code == 200 else None


# Two versions of one model side by side, in a deploy script's order: (method, path, query), a prediction's query
# being the factor of the version it reaches (sent to the inference address, the rest to the management address).
V2_FACTOR = 5  # klass 2.0's model-config (1.0's: 3), so that each answer says which version computed it
VERSION_CALLS = [
    ("POST", "/models", {"url": "klass.mar", "initial_workers": "1", "synchronous": "true"}),
    ("POST", "/models", {"url": "klass_v2.mar", "initial_workers": "1", "synchronous": "true"}),
    ("POST", "/models", {"url": "klass_v2.mar", "initial_workers": "1", "synchronous": "true"}),  # 409
    ("GET", "/models", {}),
    ("GET", "/models/klass/all", {}),
    ("GET", "/models/klass", {}),
    ("GET", "/models/klass/2.0", {}),
    ("POST", "/predictions/klass", 3),  # the default: the first version registered
    ("POST", "/predictions/klass/2.0", V2_FACTOR),
    ("POST", "/predictions/klass/1.0", 3),
    ("POST", "/predictions/klass/9.9", None),  # no such version: TorchServe's refusal
    ("DELETE", "/models/klass/1.0", {}),  # the default while 2.0 is served: refused
    ("PUT", "/models/klass/2.0", {"min_worker": "2", "synchronous": "true"}),
    ("GET", "/models/klass/all", {}),
    ("PUT", "/models/klass/2.0/set-default", {}),
    ("GET", "/models/klass", {}),
    ("POST", "/predictions/klass", V2_FACTOR),  # the new default
    ("POST", "/predictions/klass/1.0", 3),
    ("DELETE", "/models/klass/1.0", {}),
    ("GET", "/models/klass/all", {}),
    ("DELETE", "/models/klass", {}),
    ("GET", "/models", {}),
]


def klass_v2(store: Path, work: Path) -> None:
    """klass at version 2.0, made by torch-model-archiver from the same handler with a factor of its own."""
    built = ts_archives.commands(work, ("klass",))["klass"]
    config = work / "klass" / "model-config-v2.yaml"
    config.write_text(ts_archives.CLASS_CONFIG.replace("factor: 3", f"factor: {V2_FACTOR}"))
    built[built.index("--version") + 1] = "2.0"
    built[built.index("--config-file") + 1] = str(config)
    built[built.index("--export-path") + 1] = str(work / "v2")
    (work / "v2").mkdir()
    subprocess.run(built, check=True, capture_output=True, timeout=300)
    shutil.copy(work / "v2" / "klass.mar", store / "klass_v2.mar")


@pytest.mark.timeout(1200)
def test_two_versions_of_a_model_are_served_side_by_side_as_on_plain_torchserve(ray_engine, store, tmp_path):
    klass_v2(store, tmp_path / "built")
    config = ts_archives.config_file(tmp_path / "conf", store, ray_engine.http_port, load_models="")
    plain = PlainServer.from_config(for_torchserve(config), tmp_path / "ts").start()
    api = TorchServeApi(ray_engine, read(config), opener(read(config)))
    try:
        poll(lambda: _answers(plain), 120, "the plain TorchServe's management API", interval=0.5)
        ray_keys = {kind: _key(ray_engine.key_file, kind) for kind in ("management", "inference")}
        for method, path, query in VERSION_CALLS:
            if path.startswith("/predictions/"):  # the handler's computation, as the plain TorchServe's answer
                truth = predicted(plain.inference_url, plain.key("inference"), path)
                assert query is None or truth == (200, {"y": [query * 1.0, query * 2.0], "batch_size": 4}), truth
                assert predicted(ray_engine.inference_url, ray_keys["inference"], path) == truth, path
                continue
            truth = comparable(*call(plain.management_url, plain.key("management"), method, path, query))
            ours = comparable(*call(api.management_url, ray_keys["management"], method, path, query))
            assert ours == truth, (method, path, query)
            if (method, path) == ("GET", "/models") and truth[1]["models"]:  # the router's read on the inference URL
                assert call(ray_engine.inference_url, ray_keys["inference"], method, path, query) == truth
    finally:
        api.stop()
        plain.stop()


def predicted(url: str, key: str, path: str) -> tuple[int, object]:
    resp = requests.post(url + path, json={"x": [1.0, 2.0]}, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    return resp.status_code, resp.json()
