"""Fixtures for the real-TorchServe tier: tiny handlers packed by the real torch-model-archiver CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from msnb.server import LocalServer

ARCHIVER = Path(sys.executable).parent / "torch-model-archiver"

ECHO = textwrap.dedent(
    '''
    import os
    import time

    def handle(data, context):
        if data is None:
            print("echo handler loaded")
            return None
        out = []
        for idx, request in enumerate(data):
            body = request.get("body") if request.get("body") is not None else request.get("data")
            if isinstance(body, (bytes, bytearray)):
                out.append(bytes(body[::-1]))
                continue
            if isinstance(body, dict) and body.get("die"):
                os._exit(3)
            if isinstance(body, dict) and "sleep" in body:
                time.sleep(body["sleep"])
            if isinstance(body, dict) and body.get("reject"):
                context.set_response_status(422, "Unprocessable", idx)
                out.append({"error": "sample rejected: 'reject' is set", "hint": "drop the 'reject' key"})
                continue
            out.append({"echo": body, "batch": len(data)})
        return out
    '''
)

BROKEN_INIT = textwrap.dedent(
    '''
    def load_weights():
        raise ValueError("user error 42: weights do not match")

    def handle(data, context):
        if data is None:
            load_weights()
        return [None for _ in data]
    '''
)

IMPORT_ERROR = "import msnb_no_such_module_xyz\n\ndef handle(data, context):\n    return None\n"


def build_mar(directory: Path, name: str, source: str, *, version: str = "1.0",
              requirements: list[str] | None = None) -> Path:
    """A .mar built by the torch-model-archiver CLI from a one-module handler."""
    directory.mkdir(parents=True, exist_ok=True)
    handler = directory / f"{name}_handler.py"
    handler.write_text(source)
    cmd = [str(ARCHIVER), "--model-name", name, "--version", version, "--handler", str(handler),
           "--export-path", str(directory), "-f"]
    if requirements:
        req = directory / f"{name}_requirements.txt"
        req.write_text("\n".join(requirements) + "\n")
        cmd += ["--requirements-file", str(req)]
    # The archiver stages in $TMPDIR/<model-name>/: a private TMPDIR keeps parallel builds apart.
    env = {**os.environ, "TMPDIR": str(directory)}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=120)
    return directory / f"{name}.mar"


def processes_naming(path: Path) -> list[psutil.Process]:
    """Every live process whose command line mentions ``path`` (Java, workers, launcher)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(str(path) in part for part in (proc.info["cmdline"] or ())):
            found.append(proc)
    return found


def wait_until(condition, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mars")
    return {"echo": build_mar(root / "echo", "echo", ECHO),
            "broken": build_mar(root / "broken", "broken", BROKEN_INIT),
            "importerror": build_mar(root / "importerror", "importerror", IMPORT_ERROR)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, archives):
    """One running server per test module, with the echo model registered (response_timeout 3 s)."""
    srv = LocalServer(tmp_path_factory.mktemp("server"))
    with srv:
        srv.register(archives["echo"], response_timeout=3)
        yield srv
    assert not processes_naming(srv.workdir)
