"""A plain TorchServe, as a team runs one: `torchserve --start --ncs --ts-config FILE` over a model store (load_models
all), every address on a free loopback port, token auth on, in a folder of its own (pid file, sockets, logs, key
file); ready once each model answers its describe call with a READY worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import requests
from helpers import poll, processes_naming

from msnb.engines.torchserve.config import QUIET_LOG4J2, free_port

TORCHSERVE = Path(sys.executable).parent / "torchserve"


class PlainServer:
    """A plain TorchServe serving every archive of ``store``; ``nice``: its processes at that niceness (a benchmark's
    candidate that only takes the cores the rest leaves idle)."""

    def __init__(self, store: Path, work: Path, nice: int = 0, **properties: str):
        self.store, self.work, self.nice = Path(store), Path(work), nice
        (self.work / "tmp").mkdir(parents=True, exist_ok=True)
        ports = {name: free_port() for name in ("inference", "management", "metrics")}
        self.inference_url = f"http://127.0.0.1:{ports['inference']}"
        self.management_url = f"http://127.0.0.1:{ports['management']}"
        lines = {
            **{f"{name}_address": f"http://127.0.0.1:{port}" for name, port in ports.items()},
            "grpc_inference_port": free_port(),
            "grpc_management_port": free_port(),
            "model_store": self.store,
            "load_models": "all",
            "default_workers_per_model": 1,
            **properties,
        }
        (self.work / "config.properties").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        (self.work / "log4j2.xml").write_text(QUIET_LOG4J2)
        self.env = {
            **os.environ,
            "TMPDIR": str(self.work / "tmp"),
            "LOG_LOCATION": str(self.work / "logs"),
            "METRICS_LOCATION": str(self.work / "logs"),
        }

    @property
    def key_file(self) -> Path:
        return self.work / "key_file.json"

    def key(self, kind: str = "inference") -> str:
        return json.loads(self.key_file.read_text())[kind]["key"]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key()}"}

    def start(self, models: list[str], timeout: float = 240) -> PlainServer:
        argv = [
            str(TORCHSERVE),
            "--start",
            "--ncs",
            "--ts-config",
            str(self.work / "config.properties"),
            "--log-config",
            str(self.work / "log4j2.xml"),
        ]
        if self.nice:
            argv = ["nice", "-n", str(self.nice), *argv]
        with open(self.work / "launcher.log", "ab") as out:  # never a pipe: Java inherits it
            subprocess.run(argv, cwd=self.work, env=self.env, stdout=out, stderr=out, check=True, timeout=120)
        poll(
            lambda: all(self._ready(name) for name in models),
            timeout,
            f"plain TorchServe serving {models}",
            interval=0.5,
            log=self.log_tail,
        )
        return self

    def _ready(self, name: str) -> bool:
        try:
            answer = requests.get(
                f"{self.management_url}/models/{name}",
                headers={"Authorization": f"Bearer {self.key('management')}"},
                timeout=10,
            )
            return answer.status_code == 200 and any(w["status"] == "READY" for w in answer.json()[0]["workers"])
        except (OSError, ValueError, KeyError, requests.RequestException):  # not listening, or no key file yet
            return False

    def log_tail(self) -> str:
        logs = [self.work / "launcher.log", self.work / "logs" / "ts_log.log", self.work / "logs" / "model_log.log"]
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs if p.exists())

    def kill(self) -> None:
        """SIGKILL to every process of the server (Java and its workers): a crash, not a stop."""
        for proc in processes_naming(self.work):
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass

    def stop(self) -> None:
        subprocess.run([str(TORCHSERVE), "--stop"], cwd=self.work, env=self.env, capture_output=True, timeout=120)
        poll(lambda: not processes_naming(self.work), 60, "the plain TorchServe's processes to end", interval=0.5)


@contextmanager
def serving(store: Path, work: Path, models: list[str]) -> Iterator[PlainServer]:
    """A plain TorchServe serving ``store``, ready for ``models``, stopped at the end."""
    server = PlainServer(store, work)
    try:
        yield server.start(models)
    finally:
        server.stop()
