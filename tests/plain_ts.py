"""A plain TorchServe 0.12, as a team runs one: `torchserve --start --ncs --ts-config FILE` in a folder of its own
(pid file, sockets, logs, key file), token auth on — over a model store (load_models all, every address on a free
loopback port) or from a team's own config.properties (``PlainServer.from_config``); ready once each model asked
for answers its describe call with a READY worker. The truth msnb's engines are compared with."""

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


def key_of(key_file: Path, kind: str) -> str:
    """The ``kind`` key (management, inference) of a TorchServe key file."""
    return json.loads(Path(key_file).read_text())[kind]["key"]


class PlainServer:
    """A plain TorchServe serving every archive of ``store``; ``nice``: its processes at that niceness (a benchmark's
    candidate that only takes the cores the rest leaves idle)."""

    def __init__(self, store: Path, work: Path, nice: int = 0, **properties: str):
        ports = {name: free_port() for name in ("inference", "management", "metrics")}
        lines = {
            **{f"{name}_address": f"http://127.0.0.1:{port}" for name, port in ports.items()},
            "grpc_inference_port": free_port(),
            "grpc_management_port": free_port(),
            "model_store": store,
            "load_models": "all",
            "default_workers_per_model": 1,
            **properties,
        }
        Path(work).mkdir(parents=True, exist_ok=True)
        config = Path(work) / "config.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        self._use(config, Path(work), nice)

    @classmethod
    def from_config(cls, config: Path, work: Path) -> PlainServer:
        """A plain TorchServe started from a team's own ``config`` (its addresses, store and settings as written)."""
        server = cls.__new__(cls)
        server._use(Path(config), Path(work), 0)
        return server

    def _use(self, config: Path, work: Path, nice: int) -> None:
        self.config, self.work, self.nice = config, work, nice
        (self.work / "tmp").mkdir(parents=True, exist_ok=True)
        address = dict(line.split("=", 1) for line in config.read_text().splitlines() if "=" in line)
        self.inference_url, self.management_url = address["inference_address"], address["management_address"]
        self.metrics_url = address["metrics_address"]
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
        return key_of(self.key_file, kind)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key()}"}

    def start(self, models: tuple[str, ...] | list[str] = (), timeout: float = 240) -> PlainServer:
        argv = [
            str(TORCHSERVE),
            "--start",
            "--ncs",
            "--ts-config",
            str(self.config),
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
