"""The `msnb` command: help text, exit codes, errors without tracebacks, serve + predict end to end, notebooks vs export."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from helpers import BROKEN_INIT, EXAMPLE, RECORDED, build_mar, handler, poll, reach_recorded, run, standard

from msnb.capture.notebook import load_handlers
from msnb.cli.main import main
from msnb.trial.runner import predict_in_process

MSNB = str(Path(sys.executable).with_name("msnb"))


def test_console_script_help_documents_every_command_and_the_exit_codes():
    done = subprocess.run([MSNB, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for word in ("export", "serve", "predict", "exit codes: 0 success, 1 a handler failed", "2 usage error"):
        assert word in done.stdout


@pytest.mark.parametrize(
    "command, words",
    [
        ("export", ["--handler", "--format", "--check", "--kserve", "WITHOUT running it", "notebook's folder"]),
        ("serve", ["Ctrl-C", "model store", "servers/PID.json", "--state"]),
        ("predict", ["--data", "--url", "--token-file", "JSON|@FILE", "--stream"]),
        ("ray", ["up", "down", "status", "outlives the shell and the kernel", "msnb serve --engine ray"]),
    ],
)
def test_subcommand_help(capsys, command, words):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert all(w in out for w in words), out


@pytest.mark.parametrize(
    "argv", [[], ["bogus"], ["export"], ["export", "nb.ipynb", "--format", "tgz"], ["predict", "m"]]
)
def test_usage_errors_exit_2(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "usage: msnb" in err


def test_predict_without_a_running_server_says_how_to_start_one(tmp_path, capsys):
    code, _, err = run(capsys, "predict", "m", "--data", "{}", "--state", tmp_path / "serve.json")
    assert code == 1 and "No `msnb serve` is running" in err and "Hint: start one with `msnb serve" in err
    assert "Traceback" not in err


def test_predict_with_bad_json_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(capsys, "predict", "m", "--data", "{not json", "--url", "http://127.0.0.1:9")
    assert code == 2 and "--data: not valid JSON" in err and "Hint:" in err


def test_serve_with_nothing_to_serve_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(capsys, "serve", tmp_path)
    assert code == 2 and "no .mar file" in err and "Hint:" in err


def test_errors_print_no_traceback_from_the_console_script(tmp_path):
    bad = tmp_path / "x.ipynb"
    bad.write_text("{")
    done = subprocess.run([MSNB, "export", str(bad)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr


@pytest.fixture
def short_tmp():
    """A short scratch folder: TorchServe's worker socket path under TMPDIR must fit AF_UNIX's 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="msnb-t-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _said(log: Path, line: str) -> str:
    """The output so far of a `msnb serve` once it holds ``line`` (else empty)."""
    text = log.read_text()
    return text if line in text else ""


def _wait_for(state_dir: Path, proc: subprocess.Popen, timeout: float = 180) -> dict:
    """The state file of the `msnb serve` process ``proc`` (STATE_DIR/servers/PID.json), once it is written."""
    path = state_dir / "servers" / f"{proc.pid}.json"
    poll(lambda: path.exists() or proc.poll() is not None, timeout, interval=0.2)
    if path.exists():
        return json.loads(path.read_text())
    proc.kill()
    out = state_dir.parent / "serve.out"
    raise AssertionError(f"msnb serve did not get ready: {out.read_text() if out.exists() else proc.communicate()[0]}")


@pytest.mark.server
@pytest.mark.timeout(420)
def test_serve_then_predict_from_another_process_then_ctrl_c(tmp_path, capsys, short_tmp):
    nb = standard(tmp_path / "nb", handler("alpha"), handler("beta"))
    assert main(["export", str(nb), "-o", str(tmp_path / "store")]) == 0
    capsys.readouterr()
    expected = predict_in_process(load_handlers(nb, ["beta"])[0].spec, [json.loads(EXAMPLE)])[0]
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(short_tmp)}
    log = (tmp_path / "serve.out").open("w")
    proc = subprocess.Popen(
        [MSNB, "serve", str(tmp_path / "store")], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
    )
    try:
        state = _wait_for(tmp_path / "state", proc)
        java = [p for p in psutil.Process(proc.pid).children(recursive=True) if "java" in p.name()]
        # every address it prints is in its state file, and each answers there
        assert reach_recorded(state) == dict.fromkeys(RECORDED, 200), state
        printed = poll(lambda: _said(tmp_path / "serve.out", "Ctrl-C stops"), 30, "msnb serve's addresses")
        assert all(state[field] in printed for field in RECORDED), (state, printed)
        done = subprocess.run(
            [MSNB, "predict", "beta", "--data", EXAMPLE], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == expected
        missing = subprocess.run(
            [MSNB, "predict", "gamma", "--data", EXAMPLE], env=env, capture_output=True, text=True, timeout=120
        )
        assert missing.returncode == 1 and "gamma" in missing.stderr and "Hint:" in missing.stderr
        key = json.loads(Path(state["key_file"]).read_text())["inference"]["key"]
        assert key and state["inference_url"].startswith("http://127.0.0.1:")
        by_url = [MSNB, "predict", "beta", "--data", EXAMPLE, "--url", state["inference_url"]]
        no_token = subprocess.run(by_url, env=env, capture_output=True, text=True, timeout=120)
        assert no_token.returncode == 1 and "Hint: the server has token authorisation on" in no_token.stderr
        with_token = subprocess.run(
            by_url + ["--token-file", state["key_file"]], env=env, capture_output=True, text=True, timeout=120
        )
        assert with_token.returncode == 0 and json.loads(with_token.stdout) == expected, with_token.stderr
        by_url_here = ["predict", "beta", "--data", EXAMPLE, "--url", state["inference_url"], "--token-file"]
        (tmp_path / "inference.json").write_text(json.dumps({"inference": {"key": key}}))  # no expiry, no management
        (tmp_path / "key.txt").write_text(key + "\n")  # the key alone
        for keys in ("inference.json", "key.txt"):
            code, out, err = run(capsys, *by_url_here, tmp_path / keys)
            assert code == 0 and json.loads(out) == expected, err
        code, _, err = run(capsys, *by_url_here, tmp_path / "absent.json")
        assert code == 1 and "The key file" in err and "does not exist" in err and "--token-file FILE" in err
        assert "server.start()" not in err
        code, _, err = run(
            capsys,
            "predict",
            "gamma",
            "--data",
            EXAMPLE,
            "--url",
            state["inference_url"],
            "--token-file",
            tmp_path / "key.txt",
        )
        assert code == 1 and f"No model 'gamma' is served at {state['inference_url']}" in err, err
        assert "registered: ?" not in err and "%ms_serve" not in err and "GET /models" in err
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        log.close()
    out = (tmp_path / "serve.out").read_text()
    assert code == 0, out
    assert "serving alpha 1.0" in out and "serving beta 1.0" in out and "TorchServe stopped" in out
    assert not list((tmp_path / "state" / "servers").iterdir()), "the state file goes with the server"
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in java)


@pytest.mark.server
@pytest.mark.timeout(420)
def test_serve_exits_1_with_the_log_when_torchserve_dies(tmp_path, capsys, short_tmp):
    nb = standard(tmp_path / "nb", handler("alpha"))
    assert main(["export", str(nb), "-o", str(tmp_path / "store")]) == 0
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(short_tmp)}
    with (tmp_path / "serve.out").open("w") as log:
        proc = subprocess.Popen(
            [MSNB, "serve", str(tmp_path / "store")], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
        )
        try:
            _wait_for(tmp_path / "state", proc)
            workdir = (tmp_path / "serve.out").read_text().split("(workdir ")[1].split(")")[0]
            (java,) = [
                p
                for p in psutil.process_iter(["name", "cmdline"])
                if p.info["name"] == "java" and any(workdir in part for part in p.info["cmdline"] or ())
            ]
            java.kill()
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    out = (tmp_path / "serve.out").read_text()
    assert code == 1, out
    assert "error: TorchServe exited by itself." in out and "Hint:" in out and "TorchServe stopped" in out


@pytest.mark.server
@pytest.mark.timeout(420)
def test_serve_a_folder_with_one_broken_archive_serves_the_others(tmp_path, capsys, short_tmp):
    nb = standard(tmp_path / "nb", handler("alpha"))
    assert main(["export", str(nb), "-o", str(tmp_path / "store")]) == 0
    build_mar(tmp_path / "b", "broken", BROKEN_INIT)
    shutil.copy(tmp_path / "b" / "broken.mar", tmp_path / "store")
    env = {**os.environ, "MSNB_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(short_tmp)}
    with (tmp_path / "serve.out").open("w") as log:
        proc = subprocess.Popen(  # as a shell starts a background job (`msnb serve store &`): SIGINT ignored
            [MSNB, "serve", str(tmp_path / "store")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        try:
            _wait_for(tmp_path / "state", proc)
            done = subprocess.run(
                [MSNB, "predict", "alpha", "--data", EXAMPLE], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0 and "label" in done.stdout, done.stderr
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
    out = (tmp_path / "serve.out").read_text()
    assert code == 0, out
    assert "serving alpha 1.0" in out and "broken.mar" in out and "user error 42" in out, out
    assert "serving 1 of 2 archives" in out


@pytest.mark.server
@pytest.mark.timeout(300)
def test_serve_exits_1_when_no_archive_loads(tmp_path, capsys, short_tmp, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    mar = build_mar(tmp_path / "b", "broken", BROKEN_INIT)
    code, out, err = run(capsys, "serve", mar, "--state", tmp_path / "serve.json")
    assert code == 1 and "user error 42" in err and "None of the 1 archive(s) could be served" in err
    assert "Hint:" in err and "TorchServe stopped" in out


@pytest.mark.server
@pytest.mark.timeout(300)
def test_demo_exports_serves_predicts_and_stops(short_tmp):
    env = {**os.environ, "TMPDIR": str(short_tmp)}
    done = subprocess.run(
        [sys.executable, "-m", "msnb.cli.demo"], capture_output=True, text=True, timeout=280, env=env, cwd=short_tmp
    )
    assert done.returncode == 0, done.stdout + done.stderr
    prediction = json.loads(done.stdout.split("prediction: ", 1)[1].splitlines()[0])
    assert set(prediction) == {"label", "score"}
    assert "the notebook is not executed" in done.stdout and "stopping the server" in done.stdout
