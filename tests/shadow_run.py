"""`msnb shadow` as a terminal runs it: started as a process in a folder of its own (its state folder too), found
through the state file it writes, asked as a client asks (raw HTTP: status, headers and bytes), stopped with Ctrl-C."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers import poll

MSNB = str(Path(sys.executable).with_name("msnb"))


@dataclass(frozen=True)
class Raw:
    """An answer as it came: status, headers (lowercased names, in order), body, and how many reads it took."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    pieces: int = 1

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)


def ask(url: str, path: str, body: bytes = b"", headers: dict | None = None, method: str = "POST") -> Raw:
    """One request on a connection of its own; a chunked answer is read chunk by chunk (its pieces counted)."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        pieces = []
        while piece := resp.read1(1 << 16):
            pieces.append(piece)
        return Raw(resp.status, [(k.lower(), v) for k, v in resp.getheaders()], b"".join(pieces), len(pieces))
    finally:
        conn.close()


def side_options(role: str, server) -> list:
    """``--ROLE URL --ROLE-token-file KEY_FILE`` for a server (a plain TorchServe) as the primary or the candidate."""
    return [f"--{role}", server.inference_url, f"--{role}-token-file", server.key_file]


class Front:
    """``msnb shadow ARGV...`` in ``folder`` (its output in folder/shadow.out), up once its state file is written."""

    def __init__(self, folder: Path, *argv: object, timeout: float = 240):
        self.folder, self.state = Path(folder), Path(folder) / "state"
        self.env = {**os.environ, "MSNB_STATE_DIR": str(self.state)}
        self.folder.mkdir(parents=True, exist_ok=True)
        self.out_path = self.folder / "shadow.out"
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(
                [MSNB, "shadow", *map(str, argv)], cwd=self.folder, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        state = self.state / "shadows" / f"{self.proc.pid}.json"
        poll(lambda: state.exists() or self.proc.poll() is not None, timeout, interval=0.2)
        assert state.exists(), self.output()
        self.record = json.loads(state.read_text())
        self.url, self.metrics_url, self.state_file = self.record["url"], self.record["metrics_url"], state

    def output(self) -> str:
        return self.out_path.read_text()

    def command(self, *argv: object) -> subprocess.CompletedProcess:
        """`msnb shadow ARGV...` beside the running front (it finds it through the state folder)."""
        return subprocess.run(
            [MSNB, "shadow", *map(str, argv)],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def status(self) -> dict:
        """What `msnb shadow status --json` prints, asked of the front's metrics address directly (the command's
        own start is seconds of imports: a poll asks often)."""
        key = json.loads(Path(self.record["key_file"]).read_text())["management"]["key"]
        answer = ask(self.metrics_url, "/shadow/status", headers={"Authorization": f"Bearer {key}"}, method="GET")
        assert answer.status == 200, answer
        return json.loads(answer.body)

    def model(self, name: str) -> dict:
        return self.status()["models"].get(name, {})

    def differences(self) -> list[dict]:
        log = self.folder / "shadow-differences.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def stop(self) -> tuple[int, str]:
        """Ctrl-C: its exit code and everything it said."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=120)
        return code, self.output()
