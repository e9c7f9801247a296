"""A plain TorchServe 0.12 started as a team starts it (`torchserve --start --ts-config FILE`), in a folder of its own:
the truth the Ray engine's TorchServe interfaces are compared with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TORCHSERVE = Path(sys.executable).parent / "torchserve"


def key_of(key_file: Path, kind: str) -> str:
    """The ``kind`` key (management, inference) of a TorchServe key file."""
    return json.loads(Path(key_file).read_text())[kind]["key"]


class PlainTorchServe:
    """``torchserve --start --ts-config FILE`` in ``work`` (its pid file, sockets, logs and key file there)."""

    def __init__(self, config: Path, work: Path):
        self.work = work
        (work / "tmp").mkdir(parents=True)
        self.env = {
            **os.environ,
            "TMPDIR": str(work / "tmp"),
            "LOG_LOCATION": str(work / "logs"),
            "METRICS_LOCATION": str(work / "logs"),
        }
        with open(work / "launcher.log", "wb") as out:  # never a pipe: Java inherits it
            subprocess.run(
                [TORCHSERVE, "--start", "--ts-config", config, "--ncs"],
                cwd=work,
                env=self.env,
                stdout=out,
                stderr=out,
                check=True,
            )
        address = dict(line.split("=", 1) for line in config.read_text().splitlines() if "=" in line)
        self.url, self.inference_url = address["management_address"], address["inference_address"]
        self.metrics_url = address["metrics_address"]

    def key(self, kind: str = "management") -> str:
        return key_of(self.work / "key_file.json", kind)

    def stop(self) -> None:
        subprocess.run([TORCHSERVE, "--stop"], cwd=self.work, env=self.env, capture_output=True, timeout=120)
