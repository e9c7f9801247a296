"""The notebook's Ray has no unauthenticated door: while `%ms_serve NAME --engine ray` serves, the attacks that
worked on it (a pickle to a replica's gRPC server, a foreign `ray.init`, a job posted to the agent, a prediction
without the key) are refused, and every socket of its processes listens on loopback."""

from __future__ import annotations

import ipaddress
import json
import os
import pickle
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests
from helpers import run
from test_ray_notebook import HANDLER, NET_CELL, cell, truth

import msnb.session.core
from msnb.engines.models import PredictionError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES

LINE = """rdoor --batch-size 8 --max-batch-delay 500 --example '{"x": [1, 2, 3, 4]}'"""
FOREIGN = textwrap.dedent(
    """
    import sys, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote
    def attack(path):
        open(path, "w").write("ran")

    ray.get(attack.remote(sys.argv[2]), timeout=60)
    """
)


class Evil:
    """A pickle that runs a shell command when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def served(ip):
    fresh, saved = msnb.session.core.Session(), msnb.session.core._default
    msnb.session.core._default = fresh
    try:
        cell(ip, NET_CELL)
        cell(ip, f"%%ms_handler {LINE}\n{HANDLER}")
        yield cell(ip, "%ms_serve rdoor --engine ray")
    finally:
        fresh.stop()
        msnb.session.core._default = saved


def session_processes() -> list[psutil.Process]:
    """This process (the notebook's) and every process it started: Ray's nodes, agents, actors, the watchdog."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def listeners(procs: list[psutil.Process]) -> list[tuple[psutil.Process, str, int]]:
    found = []
    for proc in procs:
        try:
            found += [(proc, c.laddr.ip, c.laddr.port) for c in proc.net_connections("inet") if c.status == "LISTEN"]
        except psutil.NoSuchProcess:
            pass
    return found


def named(prefix: str) -> list[psutil.Process]:
    """The session's live processes whose command line starts with ``prefix`` (one that exited meanwhile, a zombie
    until its parent reaps it, is none of them)."""
    found = []
    for proc in session_processes():
        try:
            if " ".join(proc.cmdline()).startswith(prefix):
                found.append(proc)
        except psutil.NoSuchProcess:  # ZombieProcess included
            pass
    return found


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_every_listener_of_the_notebooks_ray_is_on_loopback(served):
    found = listeners(session_processes())
    assert any(proc.name() == "gcs_server" for proc, _, _ in found)  # Ray's sockets are among them
    outside = [(" ".join(proc.cmdline())[:60], ip, port) for proc, ip, port in found if not loopback(ip)]
    assert outside == []


def test_a_pickle_sent_to_a_replicas_grpc_server_is_refused_and_never_loaded(served, tmp_path):
    import grpc
    from ray.serve.generated import serve_pb2, serve_pb2_grpc

    replicas = named("ray::ServeReplica")
    assert replicas, "no Serve replica found"
    request = serve_pb2.ASGIRequest(pickled_request_metadata=pickle.dumps(Evil(tmp_path / "ran")))
    codes = []
    for _, _, port in listeners(replicas):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                serve_pb2_grpc.ASGIServiceStub(channel).HandleRequest(request, timeout=30)
                codes.append("OK")
            except grpc.RpcError as err:
                codes.append(err.code().name)
    assert "UNAUTHENTICATED" in codes and "OK" not in codes
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_foreign_ray_init_cannot_run_a_task(served, tmp_path, token):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env |= {"HOME": str(tmp_path)} | ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token} if token else {})
    env["RAY_gcs_rpc_server_connect_timeout_s"] = "5"
    env["RAY_gcs_server_port_wait_time_s"] = "1"  # one try at the GCS, not 20 a second apart: each is refused alike
    script = tmp_path / "foreign.py"
    script.write_text(FOREIGN)
    done = subprocess.run(
        [sys.executable, str(script), served._cluster.address, str(tmp_path / "ran")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode != 0
    assert "Authentication token is missing or incorrect" in done.stderr
    assert not (tmp_path / "ran").exists()


def test_the_agents_job_api_refuses_a_submission(served, tmp_path):
    agents = named("ray::DashboardAgent")
    assert agents, "no dashboard agent found"
    job = {"entrypoint": f"touch {tmp_path / 'ran'}"}
    statuses = []
    for _, _, port in listeners(agents):
        try:
            statuses.append(
                requests.post(f"http://127.0.0.1:{port}/api/job_agent/jobs/", json=job, timeout=30).status_code
            )
        except requests.RequestException:
            statuses.append(None)  # a gRPC port
    assert 401 in statuses and not any(s and 200 <= s < 300 for s in statuses)
    assert not (tmp_path / "ran").exists()


def post(served, body: bytes, key: str | None, content_type: str = "application/json") -> requests.Response:
    headers = {"Content-Type": content_type} | ({"Authorization": f"Bearer {key}"} if key is not None else {})
    return requests.post(f"{served.inference_url}/predictions/rdoor", data=body, headers=headers, timeout=120)


@pytest.mark.parametrize("key", [None, "not-the-key"])
def test_a_prediction_without_the_sessions_key_gets_torchserves_400(served, key):
    resp = post(served, b'{"x": [1, 2, 3, 4]}', key)
    assert resp.status_code == 400
    assert resp.json() == {
        "code": 400,
        "type": "InvalidKeyException",
        "message": "Token Authorization failed. Token either incorrect, expired, or not provided correctly",
    }


def test_the_key_file_is_the_users_alone_and_every_surface_sends_the_key(served, capsys):
    key_file = served.key_file
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = json.loads(key_file.read_text())["inference"]["key"]
    assert post(served, b'{"x": [1, 2, 3, 4]}', key).json() == truth(HANDLER, [1, 2, 3, 4])
    assert served.predict("rdoor", {"x": [4, 3, 2, 1]}) == truth(HANDLER, [4, 3, 2, 1])
    code, out, err = run(
        capsys,
        "predict",
        "rdoor",
        "--url",
        served.inference_url,
        "--token-file",
        key_file,
        "--data",
        '{"x": [1, 0, 0, 2]}',
    )
    assert code == 0 and json.loads(out) == truth(HANDLER, [1, 0, 0, 2]), err
    code, _, err = run(capsys, "predict", "rdoor", "--url", served.inference_url, "--data", '{"x": [1, 0, 0, 2]}')
    assert code != 0 and "HTTP 400" in err


def test_a_deeply_nested_body_among_8_requests_gets_its_own_400(served):
    inputs: list = [{"x": [i, 1, 2, 3]} for i in range(8)]
    inputs[5] = b"[" * 100_000 + b"]" * 100_000
    key = json.loads(served.key_file.read_text())["inference"]["key"]
    bodies = [item if isinstance(item, bytes) else json.dumps(item).encode() for item in inputs]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda body: post(served, body, key), bodies))
    assert answers[5].status_code == 400 and answers[5].json()["stage"] == "request"  # refused before preprocess
    assert answers[5].json()["error"] == "the request body is not JSON: nested too deeply to decode"
    assert [a.json() for i, a in enumerate(answers) if i != 5] == [
        truth(HANDLER, x["x"]) for i, x in enumerate(inputs) if i != 5
    ]


def test_a_body_over_torchserves_size_limit_gets_413_with_the_limit_named(served):
    with pytest.raises(PredictionError) as info:
        served.predict("rdoor", b"0" * (DEFAULT_MAX_BYTES + 1))
    assert info.value.status == 413
    assert f"max_request_size ({DEFAULT_MAX_BYTES} bytes" in info.value.render()


def test_each_replicas_own_http_port_asks_for_the_key_and_answers_as_the_front(served):
    """The front sends predictions straight to a model replica's own HTTP port (Serve's direct ingress): that door
    is kept like the front's, and the answer through the front is the replica's, equal to plain torch."""
    key = json.loads(served.key_file.read_text())["inference"]["key"]
    routes = requests.get(
        f"{served.inference_url}/-/msnb-targets", headers={"Authorization": f"Bearer {key}"}, timeout=60
    ).json()
    [replica] = routes["/predictions/rdoor"]
    assert replica in {f"http://127.0.0.1:{port}" for _, _, port in listeners(named("ray::ServeReplica:rdoor"))}
    body, url = b'{"x": [2, 0, 1, 3]}', f"{replica}/predictions/rdoor"
    for sent in (None, "not-the-key"):
        headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {sent}"} if sent else {})
        assert requests.post(url, data=body, headers=headers, timeout=60).json()["type"] == "InvalidKeyException"
    direct = requests.post(
        url, data=body, timeout=60, headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    )
    assert direct.json() == post(served, body, key).json() == truth(HANDLER, [2, 0, 1, 3])
    assert requests.get(f"{served.inference_url}/-/msnb-targets", timeout=60).status_code == 400  # the key, here too
