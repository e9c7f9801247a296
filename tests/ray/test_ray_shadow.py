"""`msnb shadow STORE --primary URL`: a TorchServe team's archives (torch-model-archiver's) answered by their plain
TorchServe through the front, byte for byte, while msnb's local Ray Serve, started for the STORE, gets every copy:
the archive whose answers differ between the two engines is found (and only it), a cutover hands the answers to Ray,
and Ctrl-C stops the front and its Ray, leaving no process behind."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from helpers import ECHO, REQUEST_IDS, build_mar, poll, processes_naming
from plain_ts import serving
from shadow_run import Front, ask, side_options

JSON = {"content-type": "application/json"}


@pytest.mark.timeout(900)
def test_a_plain_torchserve_answers_through_the_front_while_ray_serve_gets_the_copies_then_the_cutover(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    for name, source in (("echo", ECHO), ("ids", REQUEST_IDS)):
        shutil.copy(build_mar(tmp_path / name, name, source), store / f"{name}.mar")
    with serving(store, tmp_path / "primary", ["echo", "ids"]) as primary:
        code, out, workdir = _shadowed(tmp_path, store, primary)
    assert code == 0 and "Ray Serve (the candidate) stopped" in out, out
    poll(lambda: not processes_naming(workdir), 60, "every Ray process of the candidate to end")


def _shadowed(tmp_path, store, primary) -> tuple[int, str, str]:
    """The front before ``primary``, its candidate STORE on Ray: the requests, the counts, the cutover; then Ctrl-C
    (its exit code, what it said, the candidate's workdir)."""
    front = workdir = None
    try:
        front = Front(tmp_path / "front", store, *side_options("primary", primary), timeout=600)
        workdir = re.search(r"candidate: Ray Serve at \S+ \(workdir (\S+)\)", front.output()).group(1)
        key = {**JSON, **primary.headers()}
        for i in range(6):
            body = json.dumps({"i": i}).encode()
            direct, through = (
                ask(primary.inference_url, "/predictions/echo", body, key),
                ask(front.url, "/predictions/echo", body, key),
            )
            assert (through.status, through.body) == (direct.status, direct.body) == (200, direct.body)
            assert [k for k, _ in through.headers] == [k for k, _ in direct.headers]
            assert ask(front.url, "/predictions/ids", b"{}", key).status == 200
        counts = poll(lambda: _judged(front, 6), 120, "every pair judged")
        assert counts["echo"]["equal"] == 6 and counts["ids"]["different"] == 6
        assert counts["echo"]["candidate_errors"] == counts["ids"]["candidate_errors"] == 0
        assert {line["model"] for line in front.differences()} == {"ids"}
        moved = front.command("cutover", "echo")
        assert moved.returncode == 0 and "the candidate answers echo" in moved.stdout, moved.stderr
        answer = ask(front.url, "/predictions/echo", b'{"i": 9}', key)
        assert json.loads(answer.body) == {"echo": {"i": 9}, "batch": 1}
        assert poll(lambda: front.model("echo")["answered"]["candidate"] == 1, 60)
        assert poll(lambda: front.model("echo")["equal"] == 7, 60), "the primary shadows Ray: still equal"
    finally:
        code, out = front.stop() if front else (None, "")
    return code, out, workdir


def _judged(front: Front, each: int) -> dict | None:
    models = front.status()["models"]
    ready = all(
        (c := models.get(name, {})).get("requests") == each and c["equal"] + c["different"] == each
        for name in ("echo", "ids")
    )
    return models if ready else None
