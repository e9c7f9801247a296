"""An exported folder served by `serve run serve_config.yaml` on a real two-node Ray cluster, as a user runs it: a
notebook's handlers (`msnb export nb.ipynb --ray`) and archives torch-model-archiver made (`msnb export A.mar B.mar
--ray`), the latter answering as a plain TorchServe serving the same files."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import openai
import psutil
import pytest
import requests
import torch
import ts_archives
import yaml
from api_clients import mcp_tools, openai_client
from helpers import BODY, IMPORTS, NET, build_mar, handler, notebook_answer, poll, run, standard

from msnb.engines import compare
from msnb.engines.auth import write_key_file
from msnb.engines.models import PredictionError
from msnb.engines.ray import ROUTER_APP
from msnb.engines.ray.nodes import environment, free_port
from msnb.engines.torchserve import LocalServer, TorchServeClient
from msnb.templates.msnb_runtime.ray.token_interceptor import KEY_VAR
from msnb.templates.msnb_runtime.ts.checks import read_key

# One cluster per module: keep its tests on one worker. The first test's time holds the cluster's start and the
# `serve run` of every application (several minutes on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(900)  # its group (the Ray tier's, one worker) comes from conftest
MLP_OPTIONS = "--workers 2 --batch-size 8 --max-batch-delay 50"
TEXT_BODY = BODY.split("def postprocess")[0] + 'def postprocess(output):\n    return f"label {int(output.argmax())}"\n'
V2_BODY = BODY.replace('"label": int(output.argmax()),', '"label": int(output.argmax()), "v": 2,')
# Archives torch-model-archiver made (tests/ts_archives.py), exported with `msnb export A.mar B.mar --ray`: a class
# entry point with batching, its model-config's handler section and a status of its own; a handler slower than its
# responseTimeout when asked; one served in TorchServe's kserve envelope (its service_envelope, the application's
# envelope argument).
FOREIGN = ("klass", "slow", "kserved")
ENVELOPES = {"kserved": "kserve"}
FOREIGN_REQUESTS = [  # `msnb compare`'s request lines, each sent to a plain TorchServe and to the cluster
    {"model": "klass", "body": {"x": [1, 2]}},
    {"model": "klass", "body": {"x": [1], "reject": True}},  # the handler's own 422
    {"model": "klass", "body": {"x": [0.5, 4]}},
    {"model": "slow", "body": {"sleep": 0}},
    {"model": "slow", "body": {"sleep": 6}},  # past its responseTimeout of 2 s: TorchServe's 500, "Worker died."
]
ENVELOPED_REQUESTS = [
    {"model": "kserved", "body": {"instances": [{"x": [1, 2]}, {"x": [3]}]}},
    {"model": "kserved", "path": "explanations", "body": {"instances": [{"x": [4]}]}},
]


# `msnb export A.mar B.mar C.mar D.mar --ray OUT` as it is, run with the steps it prints: a module-level entry point
# with a requirements file, a class entry point batching by its model-config, a streaming handler, and a BaseHandler
# whose replicas are asked for a GPU no node has.
AS_PRINTED = ("named", "klass", "stream")
# Three more, each asking for 0.6 CPU: each fits a node, the three do not fit the two (Ray waits; msnb says so).
CROWDED = ("kserved", "slow", "stalls")
# A handler importing a small package this environment lacks (its requirements file: one line): installed once
# beside the exported models on the cluster, as TorchServe installs it into the model's folder.
COLORED = "import termcolor\n\ndef handle(data, context):\n    return None if data is None else [termcolor.colored(str(r['body']['x']), 'red') for r in data]\n"
AS_PRINTED_REQUESTS = [
    {"model": "colored", "body": {"x": [1, 2]}},
    {"model": "named", "body": {"x": [1.0, 2.0, 3.0]}},
    {"model": "klass", "body": {"x": [1, 2]}},
    {"model": "klass", "body": {"x": [1], "reject": True}},  # the handler's own 422
    {"model": "stream", "body": {"x": 1}, "stream": True},
]


def printed_steps(out: str, address: str) -> tuple[Path, dict, list[str]]:
    """The steps `msnb export --ray` printed for a running cluster, as a shell runs them: the folder of its ``cd``,
    and the environment and command of its ``RAY_ADDRESS=HEAD:6379 serve run ...`` line (HEAD:6379: the cluster)."""
    lines = [line.strip() for line in out.splitlines()]
    folder = Path(shlex.split(next(line for line in lines if line.startswith("cd ")))[1])
    words = shlex.split(next(line for line in lines if line.startswith("RAY_ADDRESS=")).replace("HEAD:6379", address))
    env = dict(w.split("=", 1) for w in words if "=" in w.split("/")[0])
    return folder, env, [w for w in words if "=" not in w.split("/")[0]]


def test_archives_exported_as_they_are_start_on_two_one_cpu_nodes_with_the_printed_steps(two_nodes, tmp_path, capsys):
    mars = ts_archives.build_all(tmp_path / "mars", (*AS_PRINTED, "desc", *CROWDED))
    mars["colored"] = build_mar(tmp_path / "colored", "colored", COLORED, requirements=["termcolor"])
    mars["absent"] = build_mar(tmp_path / "absent", "absent", COLORED, requirements=["msnb-absent-package-xyz==1.0"])
    port = free_port()
    code, out, err = run(
        capsys,
        "export",
        *mars.values(),
        "--ray",
        tmp_path / "out",
        "--ray-port",
        port,
        "--own-replica",  # its install fails: Serve's own status of its application says so
        "absent",
        "--num-gpus",
        "desc=1",
        *(f"--num-cpus={n}=0.6" for n in CROWDED),
    )
    assert code == 0, err
    # named, klass and colored share a replica set; the streaming, the GPU, the sized and the named one each their own
    assert (
        "The application needs 2.2 CPU, 1 GPU in all (stream 1 x 0.1 CPU; desc 1 x 0.1 CPU, 1 GPU; kserved 1 x 0.6 CPU; "
        "slow 1 x 0.6 CPU; stalls 1 x 0.6 CPU; absent 1 x 0.1 CPU; msnb-models-1 (named, klass, colored) 1 x 0.1 CPU; "
        "the router 0 CPU)." in out
    )
    assert f'export {KEY_VAR}="$(python' in out
    folder, env, command = printed_steps(out, two_nodes.address)
    assert command == ["serve", "run", "serve_config.yaml"]
    # the nodes hold the key (conftest: started with it, as the printed `ray start` step says); `serve` on PATH
    env = {
        **os.environ,
        **environment(two_nodes.root),
        **env,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    log = tmp_path / "serve-run.log"
    with open(log, "w") as sink:
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=sink, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    (tmp_path / "key").write_text(two_nodes.key)  # the key alone, as a plain file
    cluster = SimpleNamespace(client=TorchServeClient.connect(url, tmp_path / "key"), inference_url=url)
    plain = LocalServer(tmp_path / "ts")
    try:
        plain.start()
        for name in (*AS_PRINTED, "colored"):
            plain.register(mars[name])
        ready = lambda: all(served_answer(cluster.client, name) for name in (*AS_PRINTED, "colored"))  # noqa: E731
        poll(ready, 600, "the exported archives' applications", interval=1, log=lambda: log.read_text()[-3000:])
        lines = [
            compare.parse_request(json.dumps(r), n, [*AS_PRINTED, "colored"], tmp_path)
            for n, r in enumerate(AS_PRINTED_REQUESTS, 1)
        ]
        rows = compare.compare(plain, cluster, lines)
        refused = requests.post(f"{url}/predictions/named", json={"x": [1.0, 2.0, 3.0]}, timeout=30)
        unplaced, uninstallable = application_status(two_nodes, "desc"), application_status(two_nodes, "absent")
        poll(
            lambda: "msnb: a replica cannot be placed" in log.read_text(),
            240,
            "msnb to say a replica waits",
            interval=2,
            log=lambda: log.read_text()[-3000:],
        )
    finally:
        plain.stop()
        cluster.client.close()
        process.send_signal(2)  # Ctrl-C: serve run shuts Serve down
        process.wait(180)
    poll(lambda: not serve_processes(two_nodes.key), 180, "Serve's processes to end after Ctrl-C", interval=1)
    said = [line for line in log.read_text().splitlines() if "msnb: a replica cannot be placed" in line]
    assert said and any(f"application '{n}'" in said[0] for n in CROWDED), log.read_text()[-3000:]
    assert "Resources required for each replica" in said[0] and "0.6" in said[0]  # what it asked, in Serve's words
    assert "Hint: the cluster has room for each replica but not for all of them" in log.read_text()
    assert [diff for *_, diff in rows] == [None] * len(rows), compare.table(rows)
    assert [ts.status for _, ts, _, _ in rows] == [200, 200, 200, 422, 200]
    assert (
        b"[1, 2]" in rows[0][2].body
    )  # termcolor's answer (colored or not, as on TorchServe), from the installed package
    assert refused.status_code == 400 and refused.json()["type"] == "InvalidKeyException", refused.text
    assert unplaced.status == "DEPLOY_FAILED", unplaced
    assert "A replica of desc asks for 0.1 CPU, 1 GPU; no node of this cluster has that" in unplaced.message
    assert "Hint: ask for less where the application is exported" in unplaced.message
    assert uninstallable.status == "DEPLOY_FAILED", uninstallable
    said = " ".join(d.message for d in uninstallable.deployments.values())  # its replica's constructor failed
    assert "pip could not install msnb-absent-package-xyz==1.0 on this node" in said
    assert "Hint: make the package reachable from the nodes' package index" in said
    pip = two_nodes.root / "ray" / "session_latest" / "runtime_resources" / "pip"
    assert not pip.exists() or not any(pip.iterdir()), "a requirement made a pip environment under Ray's temp root"
    installed = [p.name.split("-")[0] for p in folder.glob(".msnb-requirements/*/*.dist-info")]
    assert installed == ["termcolor"], installed  # once, beside the models; named's numpy (on the node) not again


def serve_processes(key: str) -> list[psutil.Process]:
    """Serve's live processes (controller, proxies, replicas) of the cluster whose nodes hold ``key``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or not (proc.info["cmdline"] or [""])[0].startswith("ray::"):
            continue
        try:
            title = proc.info["cmdline"][0]
            if proc.environ().get(KEY_VAR) == key and ("Serve" in title or "Proxy" in title):
                found.append(proc)
        except psutil.Error:  # gone meanwhile, or another user's
            continue
    return found


def served_answer(client: TorchServeClient, name: str) -> bool:
    try:
        body = {"x": [1.0, 2.0, 3.0]} if name != "klass" else {"x": [1]}
        return client.predict(name, body, timeout=30) is not None
    except Exception:
        return False


def application_status(nodes, name: str):
    """Serve's status of application ``name`` once it is no longer deploying, read through one short-lived driver."""
    import ray
    from ray import serve

    status: list = [None]

    def settled() -> bool:
        status[0] = serve.status().applications.get(name)
        return status[0] is not None and status[0].status not in ("NOT_STARTED", "DEPLOYING")

    ray.init(address=nodes.address, log_to_driver=False)
    try:
        poll(settled, 300, f"{name}'s application to settle", interval=1, log=lambda: str(status[0]))
        return status[0]
    finally:
        ray.shutdown()


def expected(folder: Path, x: list[float]) -> dict:
    """The notebook's own answer: its cells run here as plain Python (no msnb), Net with the notebook's weights.pt,
    then plain torch on the input and the mlp cell's own postprocess (scores to 4 digits)."""
    namespace: dict = {}
    exec(IMPORTS + NET + BODY, namespace)
    net = namespace["init_function"]()
    net.load_state_dict(torch.load(folder / "weights.pt", weights_only=True))
    return notebook_answer(net.eval(), x, namespace["postprocess"], batched=False)


def export(
    capsys, folder: Path, outdir: Path, port: int, pin: dict, foreign: Path, mlp_body: str = BODY, version: str = "1.0"
):
    """`msnb export --ray`, then the edits a user makes for this machine: the port, one proxy (two nodes on one
    machine would share its port), fractional CPUs, one replica per node, the router beside the proxy and its
    inference key in a file (as a mounted secret); and the applications of the archives' export (``foreign``, see
    ``with_archives``) beside the notebook's."""
    nb = standard(
        folder, handler("mlp", f"{MLP_OPTIONS} --version {version}", mlp_body), handler("text", body=TEXT_BODY)
    )
    # mlp in a replica of its own (its two replicas, one on each node, are what the redeploy and node tests watch);
    # text shares a replica set, as the export packs by default
    code, _, err = run(capsys, "export", nb, "--ray", outdir, "--own-replica", "mlp")
    assert code == 0, err
    config = yaml.safe_load((outdir / "serve_config.yaml").read_text())
    config["http_options"]["port"], config["proxy_location"] = port, "HeadOnly"
    foreign_apps, foreign_sets = with_archives(foreign)
    for app in config["applications"]:
        if app["name"] == ROUTER_APP:
            app["args"] |= {"resources": pin, "key_file": str(key_file(outdir))}
            app["args"]["sets"] = {**app["args"].get("sets", {}), **foreign_sets}
        else:
            app["args"] |= {"num_cpus": 0.25, "max_replicas_per_node": 1}
    config["applications"][-1:-1] = foreign_apps
    (outdir / "serve_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def with_archives(foreign: Path) -> tuple[list[dict], dict[str, str]]:
    """The model applications and replica sets of `msnb export A.mar B.mar --ray FOREIGN`, to serve beside the
    notebook's on one cluster (one router): each model folder named by its path, a small CPU share, TorchServe's
    service_envelope as the model's envelope argument, each set renamed (the notebook's export numbers its own from
    1 too); and which set serves each of its models (for the one router's ``sets``)."""
    config = yaml.safe_load((foreign / "serve_config.yaml").read_text())
    apps = [app for app in config["applications"] if app["name"] != ROUTER_APP]
    for app in apps:
        members = app["args"].get("models")
        app["args"]["num_cpus"] = 0.1
        if members is None:
            app["args"]["model_dir"] = str(foreign / app["args"]["model_dir"])  # (app["name"] is the model's)
            app["args"] |= {"envelope": ENVELOPES[app["name"]]} if app["name"] in ENVELOPES else {}
            continue
        app["name"] = app["args"]["name"] = f"foreign-{app['name']}"
        for member in members:
            member["model_dir"] = str(foreign / member["model_dir"])
            member |= {"envelope": ENVELOPES[member["app"]]} if member["app"] in ENVELOPES else {}
    sets = {m["app"]: app["name"] for app in apps for m in app["args"].get("models", [])}
    return apps, sets


def key_file(outdir: Path) -> Path:
    """The router's inference key, beside the exported folder (TorchServe's key_file.json format)."""
    path = outdir.parent / "key_file.json"
    return path if path.exists() else write_key_file(path)


def authorised(outdir: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {read_key(key_file(outdir))}"}


class Served:
    """`serve run serve_config.yaml` from the exported folder, against the two-node cluster."""

    def __init__(self, two_nodes, folder: Path, outdir: Path, port: int):
        self.nodes, self.folder, self.outdir = two_nodes, folder, outdir
        self.url = f"http://127.0.0.1:{port}"
        self.client = TorchServeClient.connect(self.url, key_file(outdir))
        self.log = outdir.parent / "serve-run.log"
        self.process = self.serve("run")

    def serve(self, *args: str) -> subprocess.Popen:
        env = {**os.environ, **environment(self.nodes.root), "RAY_ADDRESS": self.nodes.address}
        serve = str(Path(sys.executable).parent / "serve")
        with open(self.log, "a") as log:
            return subprocess.Popen(
                [serve, *args, "serve_config.yaml"], cwd=self.outdir, env=env, stdout=log, stderr=log
            )

    def answers(self, name: str = "mlp", body: dict | None = None) -> bool:
        try:
            return bool(self.client.predict(name, body or {"x": [1, 2, 3, 4]}, timeout=30))
        except Exception:
            return False

    def stop(self) -> None:
        self.client.close()
        self.process.send_signal(2)  # Ctrl-C: serve run tears its applications down
        self.process.wait(120)


@pytest.fixture(scope="module")
def archives(tmp_path_factory, capsys_module) -> dict[str, Path]:
    """FOREIGN's archives (NAME -> .mar) and, as "out", their `msnb export A.mar B.mar --ray OUT` folder."""
    root = tmp_path_factory.mktemp("mars")
    mars = ts_archives.build_all(root, FOREIGN)
    code, out, err = run(capsys_module, "export", *mars.values(), "--ray", root / "out")
    assert code == 0, err
    return {**mars, "out": root / "out"}


@pytest.fixture(scope="module")
def served(two_nodes, archives, tmp_path_factory, capsys_module):
    root = tmp_path_factory.mktemp("export")
    port = free_port()
    export(capsys_module, root / "nb", root / "out", port, two_nodes.head_resource, archives["out"])
    served = Served(two_nodes, root / "nb", root / "out", port)
    served.archives = archives["out"]
    try:
        poll(
            lambda: served.answers("mlp") and served.answers("text"),
            600,
            "both applications",
            interval=1,
            log=lambda: served.log.read_text()[-3000:],
        )
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def capsys_module():
    class Capture:  # `run` reads the CLI's output through readouterr(); module fixtures cannot use capsys
        def readouterr(self):
            return "", ""

    return Capture()


def clients(
    served: Served, stop: threading.Event, n: int = 8, timeout: float = 60
) -> tuple[list, list, ThreadPoolExecutor]:
    """``n`` clients predicting in a loop until ``stop``; answers and failures are collected, a failure as
    (when it was sent, how long it waited, the error) with ``time.monotonic()`` times."""
    answers, failures = [], []

    def client(i: int) -> None:
        session = TorchServeClient.connect(served.url, key_file(served.outdir))
        while not stop.is_set():
            sent = time.monotonic()
            try:
                answers.append(session.predict("mlp", {"x": [i, 1, 2, 3]}, timeout=timeout))
            except Exception as err:  # every failure counts, with how long it waited
                failures.append((sent, time.monotonic() - sent, err))
        session.close()

    pool = ThreadPoolExecutor(n)
    for i in range(n):
        pool.submit(client, i)
    return answers, failures, pool


def lost(failures: list, answered: int, since: float, event: str) -> str:
    """What the failed requests got: how many, when they were sent (seconds after ``since``, the ``event``), how
    long they waited, and each kind of error (type, HTTP status, first line of the message) with its count."""
    if not failures:
        return "no request failed"
    sent = sorted(f[0] - since for f in failures)
    waits = sorted(f[1] for f in failures)
    kinds: dict[str, int] = {}
    for _, _, err in failures:
        status = getattr(err, "status", None)
        kind = f"{type(err).__name__}{f' {status}' if status else ''}: {(str(err).splitlines() or [''])[0][:300]}"
        kinds[kind] = kinds.get(kind, 0) + 1
    lines = [f"  {n} x {kind}" for kind, n in sorted(kinds.items(), key=lambda item: -item[1])]
    return (
        f"{len(failures)} of {len(failures) + answered} requests failed, sent {sent[0]:+.1f} s to {sent[-1]:+.1f} s "
        f"after {event}, waiting {waits[0]:.1f} to {waits[-1]:.1f} s:\n" + "\n".join(lines)
    )


def serve_warnings(nodes, limit: int = 20) -> str:
    """The last warnings and errors of Serve's controller and of the router (a replica lost, a call sent again);
    the router's slow queue-length probes (frequent under load) only counted."""
    folder = nodes.root / "ray" / "session_latest" / "logs" / "serve"
    paths = sorted(folder.glob("controller_*.log")) + sorted(folder.glob("replica_msnb-router_*.log"))
    lines = [
        f"{path.name}: {line[:300]}"
        for path in paths
        for line in path.read_text(errors="replace").splitlines()
        if line.startswith(("WARNING", "ERROR"))
    ]
    probes = [line for line in lines if "Failed to get queue length" in line]
    lines = [line for line in lines if line not in probes][-limit:]
    return "\n".join([f"Serve's warnings ({len(probes)} slow queue-length probes left out):", *lines])


def both_replicas_running(served: Served) -> None:
    """Wait until mlp runs its two replicas and nothing else (answering is not enough: under load one replica
    answers while the other, or a rollout's new one, still starts); Serve's status read through one short-lived
    driver."""
    import ray
    from ray import serve

    states: list[dict] = [{}]

    def settled() -> bool:
        states[0] = dict(serve.status().applications["mlp"].deployments["MsnbModel"].replica_states)
        return states[0] == {"RUNNING": 2}

    ray.init(address=served.nodes.address, log_to_driver=False)
    try:
        poll(settled, 300, "mlp's two replicas running", interval=0.5, log=lambda: f"replicas by state: {states[0]}")
    finally:
        ray.shutdown()


def test_answers_equal_the_notebooks_computation_from_replicas_on_both_nodes(served):
    for x in ([1, 2, 3, 4], [0.5, -1, 2, 8]):
        assert served.client.predict("mlp", {"x": x}) == expected(served.folder, x)
    both_replicas_running(served)  # with max_replicas_per_node 1: one replica on each node


def test_exported_archives_answer_on_two_nodes_as_a_plain_torchserve_serving_them(served, archives, tmp_path):
    # The truth: TorchServe serving the same files (kserved in TorchServe's kserve envelope, service_envelope).
    cluster = SimpleNamespace(client=served.client, inference_url=served.url)
    lines = [
        compare.parse_request(json.dumps(r), n, list(FOREIGN), tmp_path)
        for n, r in enumerate(FOREIGN_REQUESTS + ENVELOPED_REQUESTS, 1)
    ]
    plain = LocalServer(tmp_path / "ts")
    enveloped = LocalServer(tmp_path / "ts-kserve", properties={"service_envelope": ENVELOPES["kserved"]})

    def up(server: LocalServer) -> None:  # the two TorchServes start and register side by side
        server.start()
        for name in FOREIGN:
            if (name in ENVELOPES) == (server is enveloped):
                server.register(archives[name])

    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(up, (plain, enveloped)))
        ready = {"klass": None, "slow": {"sleep": 0}, "kserved": ENVELOPED_REQUESTS[0]["body"]}
        poll(lambda: all(served.answers(n, body) for n, body in ready.items()), 300, "the archives' applications")
        rows = compare.compare(plain, cluster, lines[: len(FOREIGN_REQUESTS)])
        rows += compare.compare(enveloped, cluster, lines[len(FOREIGN_REQUESTS) :])
    finally:
        plain.stop()
        enveloped.stop()
    assert [diff for *_, diff in rows] == [None] * len(rows), compare.table(rows)
    assert [ts.status for _, ts, _, _ in rows] == [200, 422, 200, 200, 500, 200, 200]
    assert json.loads(rows[0][2].body) == {"y": [3, 6], "batch_size": 4}  # plain Python on the same input
    assert json.loads(rows[2][2].body) == {"y": [1.5, 12], "batch_size": 4}
    assert json.loads(rows[4][2].body)["message"] == "Worker died."
    assert json.loads(rows[5][2].body) == {"predictions": [{"y": [2, 4]}, {"y": [6]}]}
    assert json.loads(rows[6][2].body) == {"explanations": [{"y": [8]}]}


def test_a_bad_sample_among_8_concurrent_requests_gets_its_own_400(served):
    inputs = [{"x": [i, 1, 2, 3]} for i in range(8)]
    inputs[3] = {"y": 1}
    answers = served.client.predict_many("mlp", inputs, return_exceptions=True)
    assert isinstance(answers[3], PredictionError) and answers[3].status == 400
    assert answers[3].body["stage"] == "preprocess"
    assert [a for i, a in enumerate(answers) if i != 3] == [
        expected(served.folder, x["x"]) for i, x in enumerate(inputs) if i != 3
    ]


def test_a_str_answer_keeps_its_content_type_and_unknown_models_get_404(served):
    headers = authorised(served.outdir)
    resp = requests.post(f"{served.url}/predictions/text", json={"x": [1, 2, 3, 4]}, headers=headers, timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    assert resp.text == f"label {expected(served.folder, [1, 2, 3, 4])['label']}"
    missing = requests.post(f"{served.url}/predictions/nope", json={}, headers=headers, timeout=30)
    assert missing.status_code == 404 and missing.json()["type"] == "ModelNotFoundException"


def test_the_exported_router_answers_mcp_and_openais_api_with_the_same_key(served):
    key = read_key(key_file(served.outdir))
    tools, (called,) = mcp_tools(f"{served.url}/mcp", key, [("mlp", {"x": [1, 2, 3, 4]})])
    assert {t.name for t in tools} == {"mlp", "text", *FOREIGN}  # every application the router serves
    assert called.structured_content == expected(served.folder, [1, 2, 3, 4])
    client = openai_client(f"{served.url}/v1", key)
    assert [m.id for m in client.models.list()] == []  # neither model streams
    with pytest.raises(openai.BadRequestError, match="does not stream"):
        client.chat.completions.create(model="mlp", messages=[{"role": "user", "content": "x"}])


def test_batches_larger_than_one_show_in_ray_s_prometheus_metrics(served):
    def batched() -> bool:
        served.client.predict_many("mlp", [{"x": [i, 1, 2, 3]} for i in range(16)])
        for port in served.nodes.metrics_ports:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            sizes = [float(line.split()[-1]) for line in text.splitlines() if line.startswith("ray_msnbbatchsize")]
            if any(size > 1 for size in sizes):
                return True
        return False

    poll(batched, 120, "a batch size above 1 in ray_msnbbatchsize", interval=2)


def test_a_redeploy_under_8_clients_loses_no_request(served, capsys_module):
    stop = threading.Event()
    started = time.monotonic()
    answers, failures, pool = clients(served, stop)
    try:
        poll(lambda: len(answers) > 20, 60, "answers before the redeploy")
        port = int(served.url.rsplit(":", 1)[1])
        export(
            capsys_module,
            served.folder,
            served.outdir,
            port,
            served.nodes.head_resource,
            served.archives,
            V2_BODY,
            "2.0",
        )
        deploy = served.serve("run", "--non-blocking")
        assert deploy.wait(300) == 0, served.log.read_text()[-3000:]
        poll(lambda: all(a.get("v") == 2 for a in answers[-16:]), 300, "the new version answering everyone", 0.5)
    finally:
        stop.set()
        pool.shutdown(wait=True)
    assert failures == [] and len(answers) > 40, lost(failures, len(answers), started, "the clients started")


def test_removing_a_node_fails_no_request_and_none_waits_10_s(served):
    # A replica lost with its node: the router sends its call again to the live replica (templates/msnb_runtime/ray/app.py,
    # forward). A request that waits 10 s counts as failed (the clients' timeout).
    both_replicas_running(served)  # one on each node (after the redeploy test, its rollout may still run)
    stop = threading.Event()
    answers, failures, pool = clients(served, stop, timeout=10)
    removed = time.monotonic()

    def what_happened() -> str:  # each kind of loss with its count, then what Serve said
        return f"{lost(failures, len(answers), removed, 'the node went')}\n{serve_warnings(served.nodes)}"

    try:
        poll(lambda: len(answers) > 20, 60, "answers before the node goes")
        removed = time.monotonic()
        served.nodes.cluster.remove_node(served.nodes.worker)
        seen = len(answers)
        poll(lambda: len(answers) > seen + 100, 120, "answers after the node went", log=what_happened)
    finally:
        stop.set()
        pool.shutdown(wait=True)
    assert failures == [], what_happened()
