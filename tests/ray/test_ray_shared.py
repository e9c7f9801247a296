"""`msnb ray up`: a Ray that is up before it is asked. Two notebook sessions and a `msnb serve --engine ray` serve on
it side by side, each model opened only by its own session's key; a killed session's model is taken off and the Ray
stays; `msnb ray down` leaves nothing; an owner killed, a stale state file and a port taken are each said plainly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
import torch
from api_clients import mcp_tools
from helpers import build_mar, poll, processes_naming

from msnb.engines.ray.shared_sets import SHARED_SET
from msnb.templates.msnb_runtime.ray.multi_model_routes import LOADED_PATH, set_route

MSNB = str(Path(sys.executable).with_name("msnb"))
HANDLER = """
import torch

class RNet(torch.nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)

def init_function(hidden=8):
    torch.manual_seed(0)
    return RNet(hidden)

def preprocess(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)
"""
# A notebook session in a process of its own: serves NAME on the Ray engine, says where, waits until its stdin closes.
SESSION = f"""
import json, sys
import msnb.session
from msnb.spec import spec_from_source
session = msnb.session.Session()
session.serve(spec_from_source(sys.argv[1], {HANDLER!r}), engine="ray")
server = session.server()
print(json.dumps({{"key_file": str(server.key_file), "url": server.inference_url, "label": server.label}}), flush=True)
sys.stdin.read()
session.stop()
"""
X = [1.0, 2.0, 3.0, 4.0]


def expected() -> list[float]:
    """The notebook's own computation: the same module in plain torch."""
    scope: dict = {}
    exec(HANDLER, scope)
    with torch.inference_mode():
        return scope["init_function"]()(torch.tensor(X)).tolist()


def msnb(env: dict, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([MSNB, *argv], env=env, capture_output=True, text=True, timeout=timeout)


def ray_up(env: dict) -> dict:
    done = msnb(env, "ray", "up", timeout=700)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((Path(env["MSNB_STATE_DIR"]) / "ray-shared.json").read_text())


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Two `msnb ray up` at once in a scratch state folder (what each said kept for the test that reads it); `msnb
    ray down` after the module (if a test has not)."""
    folder = tmp_path_factory.mktemp("shared")
    env = {**os.environ, "MSNB_STATE_DIR": str(folder / "state")}
    ups = [
        subprocess.Popen([MSNB, "ray", "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    said = [proc.communicate(timeout=700)[0] for proc in ups]
    (folder / "ups.json").write_text(json.dumps([[proc.returncode, text] for proc, text in zip(ups, said)]))
    assert (folder / "state" / "ray-shared.json").exists(), said
    state = json.loads((folder / "state" / "ray-shared.json").read_text())
    owners = owner_processes(folder / "state")
    try:
        yield env, state, folder
    finally:
        msnb(env, "ray", "down", timeout=200)
        poll(lambda: not processes_naming(Path(state["root"])), 120, "every process of the shared Ray to end", 1)
        for owner in owners:  # (a second owner, were there one: the test below says so)
            with contextlib.suppress(psutil.NoSuchProcess):
                owner.kill()


def owner_processes(state_dir: Path) -> list[psutil.Process]:
    """The owner processes (`python -m msnb.engines.ray.shared --state ...`) of this state folder."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or ())
        if "msnb.engines.ray.shared" in line and str(state_dir / "ray-shared.json") in line:
            found.append(proc)
    return found


def test_two_ray_up_at_once_start_one_ray_and_the_second_reports_the_firsts(shared):
    env, state, folder = shared
    (first_rc, first), (second_rc, second) = json.loads((folder / "ups.json").read_text())
    assert first_rc == second_rc == 0, first + second
    started, waited = sorted([first, second], key=lambda text: "already up" in text)
    owner = f"{state['inference_url']} (owner pid {state['owner']})"
    assert f"shared Ray up: {owner}" in started, started
    assert "another `msnb ray up` is starting it: waiting for that one" in waited, waited
    assert f"shared Ray already up: {owner}" in waited, waited
    assert [p.pid for p in owner_processes(Path(env["MSNB_STATE_DIR"]))] == [state["owner"]]


def session(env: dict, name: str, folder: Path) -> tuple[subprocess.Popen, dict]:
    log = (folder / f"{name}.err").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", SESSION, name],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=folder,
    )
    line = proc.stdout.readline()
    assert line, (folder / f"{name}.err").read_text()[-3000:]
    said = json.loads(line)
    return proc, {**said, "key": json.loads(Path(said["key_file"]).read_text())["inference"]["key"]}


def listed_models(url: str, key: str) -> list[str]:
    """GET /v1/models with ``key``: the model ids it lists."""
    answer = requests.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    return sorted(m["id"] for m in answer.json()["data"])


def post(url: str, name: str, key: str) -> requests.Response:
    return requests.post(
        f"{url}/predictions/{name}", json={"x": X}, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )


def explain(url: str, name: str, key: str) -> requests.Response:
    return requests.post(
        f"{url}/explanations/{name}", json={"x": X}, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )


def completeness() -> float:
    """Integrated Gradients' completeness on the notebook's own module: the target's output less the baseline's."""
    scope: dict = {}
    exec(HANDLER, scope)
    model = scope["init_function"]()
    with torch.no_grad():
        out, base = model(torch.tensor([X]))[0], model(torch.zeros(1, 4))[0]
    target = int(out.argmax())
    return float(out[target] - base[target])


@pytest.mark.timeout(900)
def test_two_sessions_and_a_cli_serve_share_it_keys_apart_and_a_killed_session_is_taken_off(shared):
    env, state, folder = shared
    first, a = session(env, "alpha", folder)
    second, b = session(env, "beta", folder)
    try:
        assert a["url"] == b["url"] == state["inference_url"] and "shared" in a["label"]
        answer = post(a["url"], "alpha", a["key"])
        assert answer.status_code == 200 and answer.json() == pytest.approx(expected(), abs=1e-5)
        assert post(b["url"], "beta", b["key"]).json() == pytest.approx(expected(), abs=1e-5)
        # each session's key opens its own models only
        assert post(a["url"], "beta", a["key"]).status_code in (400, 401)
        assert post(b["url"], "alpha", b["key"]).status_code in (400, 401)
        why = explain(a["url"], "alpha", a["key"])  # an explanation too asks for the session's own key, not the owner's
        assert why.status_code == 200 and sum(why.json()["attributions"]) == pytest.approx(completeness(), abs=1e-2)
        assert explain(b["url"], "alpha", b["key"]).status_code in (400, 401)
        owner_key = json.loads((Path(state["root"]) / "key_file.json").read_text())["inference"]["key"]
        for own, mine in ((a, "alpha"), (b, "beta")):  # /v1 and /mcp answer each session's key with its models
            assert listed_models(own["url"], own["key"]) == []  # (/v1/models lists the models that stream or embed)
            tools, (called,) = mcp_tools(own["url"] + "/mcp", own["key"], [(mine, {"x": X})])
            assert [t.name for t in tools] == [mine] and not called.is_error, called
            assert called.structured_content["result"] == pytest.approx(expected(), abs=1e-5)
        tools, _ = mcp_tools(a["url"] + "/mcp", owner_key, [])
        assert sorted(t.name for t in tools) == ["alpha", "beta"]  # the shared Ray's own key: every model
        refused = requests.get(f"{a['url']}/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=60)
        said = refused.json()["error"]["message"]
        assert refused.status_code == 401 and f"{state['root']}/users/PID/key_file.json" in said, said
        listed = msnb(env, "ray", "status").stdout
        assert f"pid {first.pid}: alpha" in listed and f"pid {second.pid}: beta" in listed, listed
        first.kill()  # a kernel that dies: its model is taken off, the Ray and the other session's model stay
        first.wait(30)
        poll(lambda: f"pid {first.pid}" not in msnb(env, "ray", "status").stdout, 120, "the dead session's model off")
        poll(lambda: post(a["url"], "alpha", a["key"]).status_code != 200, 120, "alpha no longer answered")
        assert post(b["url"], "beta", b["key"]).json() == pytest.approx(expected(), abs=1e-5)
        cli_serve_uses_it(env, folder)
    finally:
        for proc in (first, second):
            proc.stdin.close()
            proc.wait(120)


def cli_serve_uses_it(env: dict, folder: Path) -> None:
    """`msnb serve A.mar --engine ray` serves on the shared Ray and Ctrl-C takes only its model off."""
    mar = build_mar(folder / "echo", "echo", "def handle(data, context):\n    return None if data is None else [1]\n")
    out = folder / "serve.out"
    with out.open("w") as log:
        proc = subprocess.Popen(
            [MSNB, "serve", str(mar), "--engine", "ray"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder
        )
        try:
            poll(lambda: "Ctrl-C" in out.read_text() or proc.poll() is not None, 300, "msnb serve to serve", 0.5)
            done = msnb(env, "predict", "echo", "--data", "{}")
            assert done.returncode == 0 and json.loads(done.stdout) == 1, out.read_text() + done.stderr
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(120) == 0, out.read_text()
    assert "starting Ray Serve (shared: msnb ray up)" in out.read_text()
    poll(lambda: "echo" not in msnb(env, "ray", "status").stdout, 60, "echo taken off at Ctrl-C")


BEARER_X = {"Authorization": "Bearer x"}
PID_HANDLER = "import os\n\ndef handle(data, context):\n    return None if data is None else [os.getpid()]\n"


@pytest.mark.timeout(900)
def test_a_process_s_models_load_into_the_standing_replica_and_beyond_k_into_a_set_of_its_own(shared):
    """`msnb serve PA PB PC --engine ray --models-per-replica 2` on the shared Ray: pa and pb load into the running
    replica of the standing set (started at `msnb ray up`, before them), each opened by the serving process's key;
    pc, beyond K, into a set of the process's own (named by its pid, routed by the owner's router); Ctrl-C takes
    them off, the process's own set with its replica, and the standing replica stays up."""
    env, state, folder = shared
    mars = [build_mar(folder / name, name, PID_HANDLER) for name in ("pa", "pb", "pc")]
    out, began = folder / "packed.out", time.time()
    with out.open("w") as log:
        proc = subprocess.Popen(
            [MSNB, "serve", *map(str, mars), "--engine", "ray", "--models-per-replica", "2"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
        mine = Path(state["root"]) / "users" / str(proc.pid)
        try:
            poll(lambda: "Ctrl-C" in out.read_text() or proc.poll() is not None, 300, "msnb serve to serve", 0.5)
            answers = {name: msnb(env, "predict", name, "--data", "{}") for name in ("pa", "pb", "pc")}
            assert all(a.returncode == 0 for a in answers.values()), out.read_text() + str(answers)
            pids = {name: json.loads(done.stdout) for name, done in answers.items()}
            assert pids["pa"] == pids["pb"] != pids["pc"], pids  # one replica process holds pa and pb
            assert psutil.Process(pids["pa"]).create_time() < began  # ... the standing set's, up before they came
            owned = f"msnb-models-{proc.pid}-1"
            assert json.loads((mine / "sets.json").read_text()) == {"pa": SHARED_SET, "pb": SHARED_SET, "pc": owned}
            members = json.loads((mine / "shared_set.json").read_text())
            assert [m["app"] for m in members] == ["pa", "pb"]
            assert {m["key_file"] for m in members} == {str(mine / "key_file.json")}  # this process's key opens them
            other = requests.post(f"{state['inference_url']}/predictions/pa", headers=BEARER_X, timeout=60)
            assert other.status_code in (400, 401), other.text  # another key does not
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(120) == 0, out.read_text()
    poll(lambda: "pa" not in msnb(env, "ray", "status").stdout, 60, "pa, pb and pc taken off at Ctrl-C")
    poll(lambda: not psutil.pid_exists(pids["pc"]), 120, "the process's own set's replica to end")
    poll(lambda: not {"pa", "pb"} & set(standing_loaded(state)), 60, "pa and pb unloaded from the standing replica")
    assert psutil.pid_exists(pids["pa"])  # the standing replica stays, for the next process's models


def standing_loaded(state: dict) -> dict:
    """What the standing set's replica says it loaded (asked with the shared Ray's own key, as its owner asks)."""
    owner_key = json.loads((Path(state["root"]) / "key_file.json").read_text())["inference"]["key"]
    url = f"{state['inference_url']}{set_route(SHARED_SET)}{LOADED_PATH}"
    answer = requests.get(url, headers={"Authorization": f"Bearer {owner_key}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_notebook_serves_on_the_shared_ray_after_ms_ray_up(shared, tmp_path, monkeypatch):
    """`%ms_ray up` in a real Jupyter kernel: the shared Ray is found up; `%ms_serve --engine ray` serves there with
    the kernel's own key, `%ms_ray status` lists the kernel's model, and the kernel's end takes it off."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "kernel"))  # the kernel tier's notebook runner
    import nbformat
    from nbrun import execute_notebook, stream_texts

    env, state, _ = shared
    monkeypatch.setenv("MSNB_STATE_DIR", env["MSNB_STATE_DIR"])  # the kernel inherits it
    sources = (
        "%load_ext msnb\nimport json, os\nimport msnb.session\nprint('kernel pid:', os.getpid())",
        "%ms_ray up",
        f"%%ms_handler kalpha\n{HANDLER}",
        "%ms_serve kalpha --engine ray",
        f"answer = %ms_predict kalpha --data '{json.dumps({'x': X})}'\nprint('answer:', json.dumps(answer))",
        "%ms_ray status",
        "from openai import OpenAI\nserver = msnb.session.current().server()\n"
        "key = json.load(open(server.key_file))['inference']['key']\n"
        "client = OpenAI(base_url=server.openai_base_url, api_key=key, max_retries=0)\n"
        "print('openai models:', [m.id for m in client.models.list()])",
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])
    (tmp_path / "shared.ipynb").write_text(nbformat.writes(nb))
    printed = "".join(stream_texts(execute_notebook(tmp_path / "shared.ipynb", tmp_path / "run", timeout=300)))
    pid = int(printed.split("kernel pid:")[1].split()[0])
    assert f"shared Ray already up: {state['inference_url']} (owner pid {state['owner']})" in printed, printed
    answer = json.loads(printed.split("answer:")[1].splitlines()[0])
    assert answer == pytest.approx(expected(), abs=1e-5), printed
    assert f"pid {pid}: kalpha" in printed, printed
    assert "openai models: []" in printed, printed  # the kernel's own key is taken (no 401; kalpha does not stream)
    poll(lambda: f"pid {pid}" not in msnb(env, "ray", "status").stdout, 120, "the ended kernel's model taken off")


@pytest.mark.timeout(300)
def test_ray_down_leaves_nothing(shared):
    env, state, _ = shared
    done = msnb(env, "ray", "down", timeout=200)
    assert done.returncode == 0 and f"owner pid {state['owner']}) is down" in done.stdout, done.stdout + done.stderr
    poll(lambda: not processes_naming(Path(state["root"])), 120, "every process of the shared Ray to end", 1)
    assert not Path(state["root"]).exists() and not (Path(env["MSNB_STATE_DIR"]) / "ray-shared.json").exists()
    assert "no shared Ray is up" in msnb(env, "ray", "status").stdout
    owner_said = (Path(env["MSNB_STATE_DIR"]) / "ray-shared.log").read_text()
    assert "graceful_shutdown" not in owner_said and "SIGTERM" not in owner_said, owner_said  # nothing alarming


@pytest.mark.timeout(900)
def test_an_owner_killed_takes_its_ray_with_it_and_leaves_a_stale_state_said_plainly(tmp_path):
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path / "state")}
    state = ray_up(env)
    os.kill(state["owner"], signal.SIGKILL)
    poll(lambda: not processes_naming(Path(state["root"])), 180, "the watchdog to end every Ray process", 1)
    told = msnb(env, "ray", "status").stdout
    assert "stale state file" in told and f"pid {state['owner']}, is gone): removed" in told, told
    assert not (tmp_path / "state" / "ray-shared.json").exists()


def test_a_stale_state_file_is_said_and_removed_without_starting_anything(tmp_path):
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path)}
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "ray-shared.json").write_text(
        json.dumps(
            {
                "owner": gone.pid,
                "root": str(tmp_path / "r"),
                "address": "127.0.0.1:1",
                "inference_url": "x",
                "http_port": 1,
            }
        )
    )
    down = msnb(env, "ray", "down")
    assert down.returncode == 0 and "stale state file" in down.stdout and "is gone): removed" in down.stdout
    assert not (tmp_path / "ray-shared.json").exists()
    assert "no shared Ray is up; start it with `msnb ray up`" in msnb(env, "ray", "status").stdout


def test_a_port_taken_is_refused_before_ray_starts(tmp_path):
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = msnb(env, "ray", "up", "--port", str(port))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: Port {port} on 127.0.0.1 is already in use." in done.stderr
    assert "Hint: choose another: `msnb ray up --port P`." in done.stderr
    assert not (tmp_path / "ray-shared.json").exists()


def test_a_session_whose_shared_ray_went_down_is_told_to_start_it(tmp_path, monkeypatch):
    from msnb.engines.ray.shared import SharedRay, SharedState
    from msnb.errors import ServerError

    monkeypatch.setenv("MSNB_STATE_DIR", str(tmp_path))  # no state file: `msnb ray down` ran since it was found
    engine = SharedRay(SharedState(1, str(tmp_path / "r"), "127.0.0.1:1", "http://127.0.0.1:1", 1))
    with pytest.raises(ServerError) as told:
        engine.start()
    assert "The shared Ray is not up: no shared Ray is up." in str(told.value)
    assert "start it with `msnb ray up`" in told.value.hint


def test_an_up_that_finds_another_starting_waits_and_reports_that_ray_without_starting_one(tmp_path):
    """The lock alone, no Ray: an `up` under way holds it (here, this test); a second `msnb ray up` says it waits,
    then reports the Ray the first one wrote and starts nothing."""
    import fcntl

    env, out = {**os.environ, "MSNB_STATE_DIR": str(tmp_path)}, tmp_path / "up.out"
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "msnb.engines.ray.shared"], stdin=subprocess.PIPE
    )  # an owner, as the state file's check sees one
    try:
        with (tmp_path / "ray-shared.lock").open("a") as lock, out.open("w") as log:
            fcntl.flock(lock, fcntl.LOCK_EX)
            second = subprocess.Popen([MSNB, "ray", "up"], env=env, stdout=log, stderr=subprocess.STDOUT)
            poll(lambda: "waiting for that one" in out.read_text() or second.poll() is not None, 120, "it to wait")
            state = {
                "owner": owner.pid,
                "root": str(tmp_path / "r"),
                "address": "127.0.0.1:1",
                "inference_url": "http://127.0.0.1:1",
                "http_port": 1,
            }
            (tmp_path / "ray-shared.json").write_text(json.dumps(state))
        assert second.wait(120) == 0, out.read_text()
        told = out.read_text()
        assert f"shared Ray already up: http://127.0.0.1:1 (owner pid {owner.pid})" in told, told
        assert not (tmp_path / "ray-shared.log").exists()  # no owner was started: it would write there
    finally:
        owner.stdin.close()
        owner.wait(30)
