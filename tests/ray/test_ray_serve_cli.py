"""`msnb serve A.mar --engine ray` in a terminal: a torch-model-archiver archive served on a local Ray Serve, `msnb
predict` from another process finds it through the state file, a corrupt archive beside it is reported with a Hint,
and Ctrl-C leaves no process and no file behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ECHO, build_mar, poll, processes_naming, run

import msnb.engines.ray.engine

MSNB = str(Path(sys.executable).with_name("msnb"))


@pytest.mark.timeout(600)
def test_serve_engine_ray_answers_msnb_predict_then_ctrl_c_leaves_nothing(tmp_path):
    mar = build_mar(tmp_path / "echo", "echo", ECHO)
    corrupt = tmp_path / "corrupt.mar"
    corrupt.write_bytes(mar.read_bytes()[:100])
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path / "state")}
    log = (tmp_path / "serve.out").open("w")
    proc = subprocess.Popen(
        [MSNB, "serve", str(mar), str(corrupt), "--engine", "ray"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    state = tmp_path / "state" / "servers" / f"{proc.pid}.json"
    try:
        poll(lambda: state.exists() or proc.poll() is not None, 400, interval=0.5)
        assert state.exists(), (tmp_path / "serve.out").read_text()
        record = json.loads(state.read_text())
        assert record["engine"] == "ray" and record["inference_url"].startswith("http://127.0.0.1:")
        done = subprocess.run(
            [MSNB, "predict", "echo", "--data", '{"a": 1}'], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"echo": {"a": 1}, "batch": 1}
        assert "answered by `msnb serve` pid" in done.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
        log.close()
    out = (tmp_path / "serve.out").read_text()
    assert code == 0, out
    assert "serving echo 1.0: POST" in out and "Ray Serve stopped" in out
    # nothing alarming from Ray: no line naming Serve's proxy port, no failed task at the stop
    assert "graceful_shutdown" not in out and "is ready at" not in out, out
    assert re.search(r"openai http://127\.0\.0\.1:\d+/v1  mcp http://127\.0\.0\.1:\d+/mcp", out)
    assert f"error: {corrupt} is not a readable model archive (neither a zip" in out and "Hint: the file is" in out
    root = Path(re.search(r"inference key in (\S+)/key_file.json", out).group(1))
    assert not state.exists() and not root.exists()
    poll(lambda: not processes_naming(root), 30, "every Ray process of the server to end")


# A handler whose answer is the server's own request id: TorchServe's frontend makes UUIDs, a Ray replica its own.
REQUEST_IDS = "def handle(data, context):\n    return None if data is None else [context.get_request_id(0)]\n"
COMPARED = [
    {"model": "echo", "body": {"a": 1}},
    {"model": "echo", "body_file": "blob.bin"},
    {"model": "echo", "body": {"reject": True}},
    {"model": "echo", "path": "describe"},
    {"model": "ids", "body": {}},
]


class KeptRay:
    """The shared Ray (tests/ray/conftest.py) as `msnb compare` sees the Ray it starts: started already, and kept when
    the command stops it (``ray_engine`` deletes the applications it deployed). A Ray start and stop of a command's
    own is the subject of the test above."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    def start(self) -> "KeptRay":
        return self

    def stop(self) -> None:
        pass


@pytest.mark.timeout(600)
def test_compare_sends_every_request_to_both_engines_and_exits_1_on_the_first_difference(
    tmp_path, capsys, monkeypatch, ray_engine
):
    monkeypatch.setattr(msnb.engines.ray.engine, "LocalRay", lambda *args, **kwargs: KeptRay(ray_engine))
    archives = [build_mar(tmp_path / "echo", "echo", ECHO), build_mar(tmp_path / "ids", "ids", REQUEST_IDS)]
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01raw")
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in COMPARED) + "\n")
    code, out, err = run(capsys, "compare", *archives, "--data", f"@{tmp_path / 'requests.jsonl'}")
    assert code == 1, err
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if line[:1].isdigit()}
    assert rows["1: predictions echo"][-3:] == ["200", "200", "equal"]
    assert rows["2: predictions echo"][-3:] == ["200", "200", "equal"]
    assert rows["3: predictions echo"][-3:] == ["422", "422", "equal"]
    assert rows["4: describe echo"][-3:] == ["200", "200", "equal"]
    assert rows["5: predictions ids"][3:6] == ["200", "200", "byte"]  # the request ids: the first difference
    assert "4 of 5 requests answered alike" in out and "Hint:" in err


FAILS = "def handle(data, context):\n    if data is None:\n        return None\n    raise ValueError('no x')\n"


@pytest.mark.timeout(600)
def test_compare_over_a_store_reports_a_documented_difference_without_failing_and_writes_junit_and_json(
    tmp_path, capsys, monkeypatch, ray_engine
):
    from xml.etree import ElementTree

    monkeypatch.setattr(msnb.engines.ray.engine, "LocalRay", lambda *args, **kwargs: KeptRay(ray_engine))
    store, requests = tmp_path / "store", tmp_path / "requests"
    requests.mkdir()
    store.mkdir()
    for name, source in (("echo", ECHO), ("fails", FAILS)):
        build_mar(tmp_path / name, name, source).rename(store / f"{name}.mar")
    (requests / "echo.jsonl").write_text('{"body": {"a": 1}}\n{"body": {"reject": true}}\n')
    (requests / "fails.jsonl").write_text('{"body": {"x": 1}}\n')  # handle raises: 503 on both, the message differs
    (requests / "gone.jsonl").write_text('{"body": {}}\n')
    code, _, err = run(capsys, "compare", store, "--data-dir", requests)
    assert code == 2 and "gone.jsonl names model 'gone', which the archives given lack" in err and "Hint:" in err
    (requests / "gone.jsonl").unlink()
    ci = ["--junit-xml", tmp_path / "compare.xml", "--json", tmp_path / "compare.json"]
    code, out, err = run(capsys, "compare", store, "--data-dir", requests, *ci)
    assert code == 0, out + err
    assert "2 of 3 requests answered alike, 1 with a documented difference" in out
    row = next(line for line in out.splitlines() if line.startswith("1: predictions fails"))
    assert row.split()[3:6] == ["503", "503", "documented:"] and "carries the exception on Ray" in row
    result = json.loads((tmp_path / "compare.json").read_text())
    assert (result["ok"], result["equal"], result["documented"], result["differs"]) == (True, 2, 1, 0)
    suites = ElementTree.parse(tmp_path / "compare.xml").getroot()
    assert sorted(s.get("name") for s in suites) == ["echo", "fails"] and not suites.findall(".//failure")
