"""TorchServe archives made by torch-model-archiver, served unchanged on the kernel's Ray (``msnb serve --engine ray``'s
deploy) beside a plain TorchServe serving the same files: every answer equal — predictions, a status of the
handler's own, streamed answers, explanations, describe — and each bad archive refused with a Hint while the others
serve."""

from __future__ import annotations

import json

import pytest
import requests
import torch
import ts_archives
from helpers import eager_files, poll

from msnb.cli.serve_archives import deploy_archives
from msnb.engines import compare
from msnb.engines.torchserve import LocalServer

GOOD = ("named", "klass", "eager", "scripted", "news", "stream", "desc")
REQUESTS = [  # the JSON Lines of `msnb compare`: each sent to both servers
    {"model": "named", "body": {"x": [1.0, 2.0, 3.0]}},
    {"model": "klass", "body": {"x": [1, 2]}},
    {"model": "klass", "body": {"x": [1], "reject": True}},  # the handler's own 422
    {"model": "eager", "body": {"x": [1.0, 2.0, 3.0, 4.0]}},
    {"model": "scripted", "body": {"x": [0.5, -1.0, 2.0, 0.1]}},
    {"model": "news", "text": "a good movie"},
    {"model": "news", "path": "explanations", "text": "bad movie"},
    {"model": "stream", "body": {"x": 1}, "stream": True},
    {"model": "desc", "body": {"q": "hi"}},
    {"model": "desc", "path": "describe"},
]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    root = tmp_path_factory.mktemp("mars")
    built = ts_archives.build_all(root)
    bad = root / "bad"
    bad.mkdir()
    built["eager-tgz"] = ts_archives.as_tgz(built.pop("eager"), "eager", bad)  # Ray gets the tgz, TorchServe the zip
    built["eager"] = root / "eager" / "eager.mar"
    built["scripted-folder"] = ts_archives.as_folder(built["scripted"], bad / "scripted")
    built["truncated"] = ts_archives.truncated(built["named"], bad / "truncated.mar")
    missing = {"drop": "desc_handler.py"}
    built["missing"] = ts_archives.rewritten(built["desc"], bad / "missing.mar", **missing)
    built["twice"] = ts_archives.duplicate(built["klass"], bad / "again" / "klass.mar")
    lacking = {"requirements.txt": b"msnb-absent-package-xyz==1.0\n"}
    built["unreachable"] = ts_archives.rewritten(built["named"], bad / "unreachable.mar", replace=lacking)
    return built


@pytest.mark.timeout(900)
def test_archives_of_every_handler_kind_answer_on_ray_as_on_plain_torchserve(
    ray_engine, archives, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # no package index answers
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    on_ray = [archives[n] for n in ("named", "klass", "eager-tgz", "scripted-folder", "news", "stream", "desc")]
    bad = [archives[n] for n in ("broken", "truncated", "missing", "twice", "unreachable")]
    served = deploy_archives(ray_engine, on_ray + bad)
    monkeypatch.undo()  # TorchServe's own per-model install of named's requirements asks the real index
    out, err = capsys.readouterr()
    assert sorted(served) == sorted(GOOD), err
    for name in GOOD:
        assert f"serving {name} 1.0: POST {ray_engine.inference_url}/predictions/{name}" in out
    errors = {
        line.split(":")[0] + ":" + line.split(":")[1]: line for line in err.splitlines() if line.startswith("error:")
    }
    assert len(errors) == len(bad) and err.count("Hint:") >= len(bad), err
    assert "user error 42: weights do not match" in err  # broken's initialize, from its replica's log
    assert "not a readable model archive" in err and "truncated or corrupt" in err
    assert "names 'desc_handler.py', which is not in the archive" in err
    assert "another archive already has the model name 'klass'" in err
    assert "msnb-absent-package-xyz==1.0" in err and "no package index provided them" in err

    with LocalServer(tmp_path / "ts") as torchserve:
        for name in GOOD:
            torchserve.register(archives[name])
        lines = [compare.parse_request(json.dumps(r), n, list(GOOD), tmp_path) for n, r in enumerate(REQUESTS, 1)]
        rows = compare.compare(torchserve, ray_engine, lines)
    assert [diff for *_, diff in rows] == [None] * len(REQUESTS), compare.table(rows)
    assert [a.status for _, a, _, _ in rows] == [200, 200, 422, 200, 200, 200, 200, 200, 200, 200]
    streamed = rows[7][2]
    assert streamed.pieces > 1 and streamed.body == b"intermediate_response" * 3 + b"hello world "
    truth, _ = eager_files(tmp_path / "truth")  # the notebook's own computation: plain torch on the same weights
    expected = [round(v, 4) for v in truth(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist()]
    assert ray_engine.predict("eager", {"x": [1.0, 2.0, 3.0, 4.0]}) == expected
    assert ray_engine.predict("klass", {"x": [1, 2]}) == {"y": [3, 6], "batch_size": 4}


def streamed(engine, body: dict) -> tuple[int, bytes, str]:
    """One streamed prediction of ``stalls``: its status, what arrived, and how it ended ("complete" or "cut")."""
    key = json.loads(engine.key_file.read_text())["inference"]["key"]
    url, got = f"{engine.inference_url}/predictions/stalls", b""
    with requests.post(url, json=body, headers={"Authorization": f"Bearer {key}"}, stream=True, timeout=120) as answer:
        try:
            for piece in answer.iter_content(None):
                got += piece
        except requests.exceptions.ChunkedEncodingError:  # no closing chunk: the connection was closed or reset
            return answer.status_code, got, "cut"
    return answer.status_code, got, "complete"


def silent(engine) -> tuple[int, bytes, str] | None:
    """A stream whose handler sends nothing past its responseTimeout, once it is answered with a 500 (None before:
    the worker, the replica, being replaced)."""
    answer = streamed(engine, {"chunks": 0, "stall": 8})
    return answer if answer[0] == 500 else None


@pytest.mark.timeout(600)
def test_a_stream_stalled_past_its_response_timeout_ends_as_on_plain_torchserve(ray_engine, tmp_path, capsys):
    """Plain TorchServe 0.12 cuts a started stream whose handler sends nothing for its responseTimeout (the chunks
    so far, no closing chunk), answers 500 "Worker died." when nothing was sent yet, and restarts the worker."""
    archive = ts_archives.build_all(tmp_path / "mars", ("stalls",))["stalls"]
    assert deploy_archives(ray_engine, [archive]) == ["stalls"], capsys.readouterr().err
    whole = (200, b"c0 c1 end", "complete")
    with LocalServer(tmp_path / "ts") as torchserve:
        torchserve.register(archive)
        for engine in (torchserve, ray_engine):
            assert streamed(engine, {"chunks": 2, "stall": 0}) == whole
            assert streamed(engine, {"chunks": 2, "stall": 8}) == (200, b"c0 c1 ", "cut")
            # the worker is restarted (the replica asks to be replaced), then a stream that sends nothing times out
            status, body, end = poll(lambda e=engine: silent(e), 240, f"{engine.kind}'s 500")
            assert (status, json.loads(body)["message"], end) == (500, "Worker died.", "complete")
    assert "a stream sent nothing for its responseTimeout of 2 s" in "\n".join(ray_engine.model_log("stalls", 200))
