"""The anchor every benchmark compares msnb with: the manual TorchServe CLI loop a user runs by hand."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import psutil
import requests

from bench.harness import run_child, wait_gone
from msnb.engines.torchserve.config import choose_ports

BIN = Path(sys.executable).parent


def archive_cli(
    name: str, handler: Path, checkpoint: Path, store: Path, log: Path, fmt: str = "default", peak: bool = False
) -> dict:
    """`torch-model-archiver` as a user types it; returns its wall time (and peak RSS with ``peak``)."""
    cmd = [
        str(BIN / "torch-model-archiver"),
        "--model-name",
        name,
        "--version",
        "1.0",
        "--handler",
        str(handler),
        "--serialized-file",
        str(checkpoint),
        "--export-path",
        str(store),
        "--archive-format",
        fmt,
        "-f",
    ]
    return run_child(cmd, log, cwd=store.parent, peak=peak)


class ManualTorchServe:
    """`torchserve --start/--stop` with its own cwd, TMPDIR, config.properties and free 127.0.0.1 ports.

    Token authorisation stays ON (TorchServe's default): the key is read from ``key_file.json``, which
    the launcher writes in its cwd at every start. The private TMPDIR makes ``--stop`` stop this server only.
    """

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.store = self.workdir / "model_store"
        self.tmp = self.workdir / "tmp"
        for path in (self.store, self.tmp):
            path.mkdir(parents=True, exist_ok=True)
        self.ports = choose_ports()
        self.session = requests.Session()
        self._write_config()

    def _write_config(self) -> None:
        p = self.ports
        props = {
            "inference_address": f"http://127.0.0.1:{p['inference']}",
            "management_address": f"http://127.0.0.1:{p['management']}",
            "metrics_address": f"http://127.0.0.1:{p['metrics']}",
            "grpc_inference_address": "127.0.0.1",
            "grpc_management_address": "127.0.0.1",
            "grpc_inference_port": p["grpc_inference"],
            "grpc_management_port": p["grpc_management"],
            "model_store": self.store,
            "enable_model_api": "true",
            "default_workers_per_model": 1,
            # Java puts worker sockets in /tmp/.ts.sock.<port> whatever TMPDIR says: a port of our own.
            "initial_worker_port": random.randrange(20000, 30000, 50),
        }
        (self.workdir / "config.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _cli(self, *args: str) -> None:
        env = {**os.environ, "TMPDIR": str(self.tmp)}
        run_child([str(BIN / "torchserve"), *args], self.workdir / "launcher.log", env=env, cwd=self.workdir)

    def start(self) -> None:
        """`torchserve --start`, then poll /ping (with the fresh token) until healthy."""
        self._cli("--start", "--ncs", "--ts-config", "config.properties", "--model-store", str(self.store))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.session.get(self.url("inference", "ping"), headers=self.auth("inference"), timeout=2).ok:
                    return
            except (requests.RequestException, OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"manual TorchServe did not become healthy; see {self.workdir}/launcher.log")

    def stop(self) -> None:
        """`torchserve --stop` (SIGTERM only), then wait until Java and its workers have exited."""
        procs = self.processes()
        self._cli("--stop")
        wait_gone(procs, timeout=60)

    def processes(self) -> list[psutil.Process]:
        """Java (from the launcher's pid file) and its workers."""
        pid = java_pid(self.tmp)
        if pid is None:
            return []
        java = psutil.Process(pid)
        return [java, *java.children(recursive=True)]

    def url(self, api: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[api]}/{path}"

    def auth(self, api: str) -> dict:
        keys = json.loads((self.workdir / "key_file.json").read_text())
        return {"Authorization": f"Bearer {keys[api]['key']}"}

    def register(self, mar: str, **params) -> None:
        query = {"url": mar, "initial_workers": 1, "synchronous": "true", **params}
        resp = self.session.post(self.url("management", "models"), params=query, headers=self.auth("management"))
        if not resp.ok:
            raise RuntimeError(f"register {mar}: {resp.status_code} {resp.text[:500]}")

    def predict(self, name: str, data: dict) -> dict:
        resp = self.session.post(
            self.url("inference", f"predictions/{name}"), json=data, headers=self.auth("inference")
        )
        resp.raise_for_status()
        return resp.json()

    def close(self) -> None:
        """Stop the server if it still runs (no-op otherwise) and delete its workdir."""
        if self.processes():
            self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def java_pid(tmpdir: Path) -> int | None:
    """The Java pid TorchServe's launcher recorded in ``$TMPDIR/.model_server.pid``."""
    try:
        pid = int((tmpdir / ".model_server.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None
