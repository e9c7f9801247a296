"""The differential run's machinery: one plain TorchServe 0.12 and one `msnb serve --engine ray --ts-config`, started
from the same config.properties over the same model store (archives made by torch-model-archiver), every ``Call``
sent to both in order, and each answer read as a script reads it (``READERS``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import ts_archives
from differential_cases import Call
from helpers import poll
from plain_ts import PlainServer, key_of
from prometheus_client.parser import text_string_to_metric_families

from msnb.engines.ray.nodes import free_port

MSNB = str(Path(sys.executable).with_name("msnb"))
# A describe entry's fields that are each server's own (its workers are compared by their statuses).
OWN = ("workers",)
LOADING = textwrap.dedent("""
    import time

    def handle(data, context):
        if data is None:
            time.sleep(8)
            return None
        return [{"loaded": True} for _ in data]
""")
V2_FACTOR = 5
FAILED = "Prediction failed"  # TorchServe's message when a handler raises
NO_SAMPLES = (
    "ts_queue_latency_microseconds"  # Ray Serve keeps no queue time per model  # klass_v2.mar's factor (klass.mar's: 3)
)


def archives(root: Path) -> Path:
    """The model store both servers read: named, klass (1.0 and 2.0), desc, broken, loading and a corrupt file;
    and klass.mar once more outside it (``root/outside/elsewhere.mar``)."""
    built = ts_archives.build_all(root / "built", ("named", "klass", "desc", "broken"))
    store = root / "store"
    store.mkdir()
    for mar in built.values():
        (store / mar.name).write_bytes(mar.read_bytes())
    cmds = ts_archives.commands(root / "extra", ("klass",))
    second = cmds["klass"]
    config = root / "extra" / "klass" / "model-config-v2.yaml"
    config.write_text(ts_archives.CLASS_CONFIG.replace("factor: 3", f"factor: {V2_FACTOR}"))
    second[second.index("--version") + 1] = "2.0"
    second[second.index("--config-file") + 1] = str(config)
    second[second.index("--export-path") + 1] = str(root / "v2")
    (root / "v2").mkdir()
    loading = root / "extra" / "loading" / "loading_handler.py"
    loading.parent.mkdir(parents=True)
    loading.write_text(LOADING)
    for cmd in (second, ts_archives.archiver(root / "extra" / "loading", "loading", str(loading))):
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    (store / "klass_v2.mar").write_bytes((root / "v2" / "klass.mar").read_bytes())
    (store / "loading.mar").write_bytes((root / "extra" / "loading" / "loading.mar").read_bytes())
    (store / "corrupt.mar").write_bytes(b"not a zip archive")
    (root / "outside").mkdir()
    (root / "outside" / "elsewhere.mar").write_bytes(built["klass"].read_bytes())
    return store


def properties(store: Path, root: Path, **more: str) -> dict[str, str]:
    """config.properties of a team's TorchServe on ports of its own (ts_archives.config_file: the management API on,
    named.mar at start), as its keys and values."""
    path = ts_archives.config_file(root, store, free_port(), **more)
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


class Server:
    """Where a call goes: the three APIs' addresses and the key file of one server."""

    def __init__(self, name: str, addresses: dict[str, str], key_file: Path):
        self.name, self.addresses, self.key_file = name, addresses, key_file

    def headers(self, call: Call) -> dict[str, str]:
        kind = call.api if call.key == "own" else call.key
        own = {"management": "management", "inference": "inference"}
        if kind in own:
            return {"Authorization": f"Bearer {key_of(self.key_file, own[kind])}"}
        if call.key == "own":  # the metrics API asks for no key
            return {}
        faked = {
            "none": None,
            "wrong": "Bearer wrong-key",
            "empty": "Bearer ",
            "raw": key_of(self.key_file, "management"),
        }
        return {} if faked[call.key] is None else {"Authorization": faked[call.key]}

    def send(self, call: Call, outside: Path) -> tuple[int, str, bytes]:
        url = self.addresses[call.api] + call.path + (f"?{call.query}" if call.query else "")
        url = url.replace("{outside}", f"file://{outside / 'elsewhere.mar'}")
        headers = self.headers(call)
        data = None
        if call.body is not None:
            data = call.body.encode() if isinstance(call.body, str) else json.dumps(call.body).encode()
            headers["Content-Type"] = call.content_type
        resp = requests.request(call.method, url, data=data, headers=headers, timeout=600)
        return resp.status_code, resp.headers.get("Content-Type", ""), resp.content


class MsnbServe:
    """`msnb serve --engine ray --ts-config FILE` in a process of its own; its state file says where it answers."""

    def __init__(self, config: Path, work: Path):
        self.work, self.out = work, work / "serve.out"
        env = {**os.environ, "MSNB_STATE_DIR": str(work / "state")}
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [MSNB, "serve", "--engine", "ray", "--ts-config", str(config)],
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        state = work / "state" / "servers" / f"{self.proc.pid}.json"
        poll(lambda: state.exists() or self.proc.poll() is not None, 600, interval=0.5)
        if not state.exists():
            raise AssertionError(f"msnb serve did not start:\n{self.out.read_text()[-3000:]}")
        self.state = json.loads(state.read_text())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def ready(server: Server, name: str) -> bool:
    """Whether ``name``'s default version is described with all its workers READY, or not described at all (nothing
    to wait for)."""
    try:
        resp = requests.get(
            f"{server.addresses['management']}/models/{name}",
            timeout=60,
            headers={"Authorization": f"Bearer {key_of(server.key_file, 'management')}"},
        )
        if resp.status_code != 200:
            return True
        entry = resp.json()[0]
    except (requests.RequestException, ValueError, KeyError, IndexError, TypeError):
        return False
    workers = [w["status"] for w in entry["workers"]]
    return len(workers) >= entry["minWorkers"] and set(workers) <= {"READY"}


def counted(server: Server, name: str) -> bool:
    """Whether the metrics address counts ``name``'s predictions yet (Ray exports its metrics every second or so)."""
    try:
        text = requests.get(f"{server.addresses['metrics']}/metrics", timeout=30).text
        families = list(text_string_to_metric_families(text))
    except (requests.RequestException, ValueError):
        return False
    samples = [s for f in families if f.name == "ts_inference_requests" for s in f.samples]
    return any(s.labels.get("model_name") == name for s in samples)


STATES = {"ready": ready, "counted": counted}


def bring(server: Server, before: str) -> None:
    """The server brought to ``before`` (``ready:NAME``, ``counted:NAME``) within a bound; a server that does not get
    there is compared as it is (its answer then shows it)."""
    if before:
        state, name = before.split(":", 1)
        poll(lambda: STATES[state](server, name), 90, interval=0.25)


def read_answer(status: int, content_type: str, body: bytes) -> object:
    """What a script reads of an answer: an error's status, ``type`` and message (before msnb's Hint); a describe's
    fields and workers' statuses; any other JSON as it is."""
    try:
        value = json.loads(body) if body.strip() else None
    except ValueError:
        return status, "text", body.decode(errors="replace").strip()[:300]
    if isinstance(value, dict) and {"code", "type", "message"} <= set(value):
        return status, value["type"], said(str(value["message"]))
    if isinstance(value, list) and value and all(isinstance(m, dict) and "modelName" in m for m in value):
        return status, [described(m) for m in value]
    return status, value


def said(message: str) -> str:
    """An error's message before msnb's Hint; a handler's exception after TorchServe's ``Prediction failed`` left
    out (Ray names it there: docs/ray.md, "Semantics")."""
    message = message.split("\nHint:")[0]
    return FAILED if message.startswith(FAILED + ": ") else message


def described(entry: dict) -> dict:
    return {
        **{k: v for k, v in entry.items() if k not in OWN},
        "workers": [w.get("status") for w in entry.get("workers", [])],
        "keys": sorted(entry),
    }


def read_type(status: int, content_type: str, body: bytes) -> object:
    answer = read_answer(status, content_type, body)
    return answer[:2] if isinstance(answer, tuple) and len(answer) == 3 else answer


def read_keys(status: int, content_type: str, body: bytes) -> object:
    try:
        value = json.loads(body)
    except ValueError:
        return status, "text"
    return status, sorted(value) if isinstance(value, dict) else type(value).__name__


def read_families(status: int, content_type: str, body: bytes) -> object:
    """TorchServe's metric families in a scrape and their samples' labels (the values are each server's own timings;
    ``ts_queue_latency_microseconds`` is declared only, without samples, on Ray: docs/ray-management.md)."""
    try:
        families = list(text_string_to_metric_families(body.decode()))
    except (ValueError, UnicodeDecodeError):
        return status, "not prometheus text"
    labels = {f.name: sorted({k for s in f.samples for k in s.labels}) for f in families if f.name.startswith("ts_")}
    if NO_SAMPLES in labels:
        labels[NO_SAMPLES] = ["declared"]
    return status, sorted(labels.items())


def read_refusal(status: int, content_type: str, body: bytes) -> object:
    """A refusal msnb keeps on purpose: its status, type and whether its message carries a Hint."""
    answer = read_answer(status, content_type, body)
    if isinstance(answer, tuple) and len(answer) == 3 and answer[1] != "text":
        return status, answer[1], "\nHint:" in json.loads(body)["message"]
    return answer


READERS = {
    "answer": read_answer,
    "type": read_type,
    "status": lambda status, *_: status,
    "keys": read_keys,
    "families": read_families,
    "refusal": read_refusal,
}


def run_all(calls: list[Call], plain: Server, ours: Server, outside: Path) -> dict[str, tuple[object, object]]:
    """Every call sent to both, in order: id -> (TorchServe's answer read, msnb's); written to
    ``outside/../answers.json`` as they come, for a reader. Each server gets the whole sequence in a thread of its own
    (what one server answers never depends on the other), so the run waits for the slower of the two, not for both."""
    seen: dict[str, list[object]] = {call.id: [None, None] for call in calls}
    lock = threading.Lock()

    def sequence(side: int, server: Server) -> None:
        for call in calls:
            bring(server, call.before)
            answer = _sent(server, call, outside, READERS["refusal" if call.deliberate else call.read])
            with lock:
                seen[call.id][side] = answer
                (outside.parent / "answers.json").write_text(json.dumps(seen, indent=1, default=str))

    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(sequence, side, server) for side, server in enumerate((plain, ours))]:
            done.result()
    return {id: (truth, mine) for id, (truth, mine) in seen.items()}


def _sent(server: Server, call: Call, outside: Path, read) -> object:
    try:
        return read(*server.send(call, outside))
    except requests.RequestException as err:  # a door that hangs up is an answer too
        return "no answer", type(err).__name__


def start_plain(store: Path, work: Path) -> tuple[PlainServer, Server]:
    """TorchServe started from a team's config.properties (its gRPC ports free ones too: its defaults may be taken)."""
    grpc = {"grpc_inference_port": str(free_port()), "grpc_management_port": str(free_port())}
    values = properties(store, work / "torchserve", **grpc)
    plain = PlainServer.from_config(work / "torchserve" / "config.properties", work / "ts").start()
    addresses = {api: values[f"{api}_address"] for api in ("inference", "management", "metrics")}
    return plain, Server("torchserve", addresses, plain.work / "key_file.json")


def start_ours(store: Path, work: Path) -> tuple[MsnbServe, Server]:
    """`msnb serve --engine ray` started from the same file on ports of its own."""
    values = properties(store, work / "ray")
    ours = MsnbServe(work / "ray" / "config.properties", work)
    addresses = {
        "inference": ours.state["inference_url"],
        "management": ours.state["management_url"],
        "metrics": values["metrics_address"],
    }
    return ours, Server("msnb-ray", addresses, Path(ours.state["key_file"]))
