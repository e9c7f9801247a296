"""Starting and stopping real TorchServes: nothing left behind, whatever way the owner ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import requests
from helpers import ECHO, build_mar, poll, processes_naming

from msnb.engines.torchserve import LocalServer
from msnb.errors import ServerError

pytestmark = pytest.mark.server


def test_two_servers_at_once_never_collide_and_stop_leaves_nothing(tmp_path):
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    first = LocalServer(tmp_path / "first").start()
    second = LocalServer(tmp_path / "second", auth=False).start()
    try:
        assert not set(first.ports.values()) & set(second.ports.values())
        first.register(mar)
        second.register(mar)
        assert first.predict("echo", {"n": 1})["echo"] == {"n": 1}
        assert second.predict("echo", {"n": 2})["echo"] == {"n": 2}
        assert requests.get(f"{second.inference_url}/ping", timeout=10).status_code == 200  # auth=False
        first.stop()
        assert not first.running and first.pid is None
        assert not processes_naming(first.workdir)
        assert second.predict("echo", {"still": 2})["echo"] == {"still": 2}
    finally:
        first.stop()
        second.stop()
    first.stop()  # a second stop is a no-op
    assert not processes_naming(second.workdir)


def test_stop_on_a_server_that_died_cleans_up_its_workers(tmp_path):
    server = LocalServer(tmp_path / "srv").start()
    server.register(build_mar(tmp_path / "mars", "echo", ECHO))
    os.kill(server.pid, signal.SIGKILL)
    assert poll(lambda: not server.running, timeout=15)
    server.stop()
    server.stop()
    assert not processes_naming(server.workdir)


def test_owner_killed_with_sigkill_takes_its_server_down(tmp_path):
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    owner = textwrap.dedent(
        """
        import sys
        from msnb.engines.torchserve import LocalServer
        server = LocalServer(sys.argv[1]).start()
        server.register(sys.argv[2])
        print(server.pid, flush=True)
        sys.stdin.read()
        """
    )
    workdir = tmp_path / "owned"
    proc = subprocess.Popen(
        [sys.executable, "-c", owner, str(workdir), str(mar)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    java_pid = int(proc.stdout.readline())
    assert processes_naming(workdir)
    proc.kill()
    proc.wait()
    assert poll(lambda: not processes_naming(workdir), timeout=15)
    assert not _alive(java_pid)


def test_default_server_is_stopped_at_normal_interpreter_exit(tmp_path):
    script = "from msnb.engines.torchserve import default_server\nprint(default_server().workdir, flush=True)\n"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the default server's workdir is a mkdtemp
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    workdir = out.stdout.strip()
    assert workdir.startswith(str(tmp_path)), out.stderr
    assert not processes_naming(workdir)


def test_missing_java_is_refused_before_launching(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java-here"))
    server = LocalServer(tmp_path / "srv")
    with pytest.raises(ServerError, match=r"needs Java[\s\S]*Hint: install a Java runtime >= 11"):
        server.start()
    assert not server.running and not (tmp_path / "srv" / "config.properties").exists()


def test_too_old_java_is_refused_before_launching(tmp_path, monkeypatch):
    java = tmp_path / "jdk8" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_292\"' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk8"))
    with pytest.raises(ServerError, match=r"needs Java >= 11, but .* is Java 8[\s\S]*Hint: install"):
        LocalServer(tmp_path / "srv").start()


def test_a_requested_port_in_use_is_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LocalServer(tmp_path / "srv", ports={"inference": port})
        with pytest.raises(ServerError, match=rf"port {port} on 127.0.0.1 is already in use[\s\S]*Hint:"):
            server.start()
    assert not server.running


def test_java_dying_at_startup_is_an_error_with_its_output_never_a_silent_success(tmp_path, monkeypatch):
    # A java that passes the version check, then fails to bind like a real one whose port was taken
    # between msnb's check and its bind (TorchServe's launcher still returns 0).
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        if [ "$1" = "-version" ]; then echo 'openjdk version "17.0.9"' >&2; exit 0; fi
        sleep 0.5
        echo "java.net.BindException: Address already in use"
        exit 1
        """)
    )
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    server = LocalServer(tmp_path / "srv")
    with pytest.raises(ServerError, match=r"exited while starting[\s\S]*Hint: free the port[\s\S]*BindException"):
        server.start()
    output = (server.log_dir / "java_stdout.log").read_text()
    assert output.count("Address already in use") == 2  # freshly chosen ports were tried once more
    assert not server.running and not processes_naming(server.workdir)


def test_a_port_taken_at_the_first_try_is_retried_on_fresh_ports_in_a_temporary_workdir(tmp_path, monkeypatch):
    # The first Java fails to bind like one whose port was taken between msnb's check and its bind;
    # the retry must find its model store again although the failed try's stop() cleaned up.
    real = shutil.which("java")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "-version" ]; then exec {real} "$@"; fi
        if [ ! -f {tmp_path}/bound-once ]; then
            touch {tmp_path}/bound-once
            echo "java.net.BindException: Address already in use"
            exit 1
        fi
        exec {real} "$@"
        """)
    )
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    server = LocalServer()
    try:
        with server:
            assert (tmp_path / "bound-once").exists()
            server.register(mar)
            assert server.predict("echo", {"n": 1})["echo"] == {"n": 1}
    finally:
        shutil.rmtree(server.workdir, ignore_errors=True)
    assert not processes_naming(server.workdir)


def test_a_start_that_times_out_leaves_nothing_running(tmp_path):
    server = LocalServer(tmp_path / "srv", startup_timeout=0.01)
    with pytest.raises(ServerError, match=r"did not become healthy within 0.01 s[\s\S]*Hint: pass a larger"):
        server.start()
    assert not server.running
    assert not processes_naming(server.workdir)


def test_a_start_interrupted_by_ctrl_c_leaves_nothing_running_and_can_start_again(tmp_path, monkeypatch):
    server = LocalServer(tmp_path / "srv")

    def interrupted(self):
        assert self.running  # Java is up; the user presses Ctrl-C while msnb waits for /ping
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(LocalServer, "_wait_ready", interrupted)
        with pytest.raises(KeyboardInterrupt):
            server.start()
    assert not server.running
    assert not processes_naming(server.workdir)
    with server:
        assert server.models() == []


def test_a_temporary_workdir_loses_its_model_store_at_stop_and_keeps_its_logs(tmp_path):
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    server = LocalServer()  # no workdir: msnb makes a temporary one
    try:
        with server:
            server.register(mar)
            assert any(server.model_store.iterdir())
        assert not server.model_store.exists()
        assert (server.log_dir / "java_stdout.log").is_file()
    finally:
        shutil.rmtree(server.workdir, ignore_errors=True)
    with LocalServer(tmp_path / "mine") as own:  # a workdir the user gave is left as it is
        own.register(mar)
    assert any(own.model_store.iterdir())


def test_keys_are_renewed_before_they_expire(tmp_path):
    with LocalServer(tmp_path / "srv", token_expiration_min=0.1) as server:  # keys live 6 s
        first = json.loads(server.layout.key_file.read_text())["management"]
        expires = _timestamp(first["expiration time"])
        assert poll(lambda: time.time() > expires + 1 and server.models() == [], timeout=30)
        assert json.loads(server.layout.key_file.read_text())["management"]["key"] != first["key"]
        stale = requests.get(
            f"{server.management_url}/models", timeout=10, headers={"Authorization": f"Bearer {first['key']}"}
        )
        assert stale.status_code == 400


def test_a_key_replaced_behind_msnbs_back_is_renewed_once_for_concurrent_calls(tmp_path):
    """Every thread's call fails with the stale key; one renewal must serve them all (TorchServe keeps one key)."""
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    with LocalServer(tmp_path / "srv") as server:
        server.register(mar, batch_size=4, max_batch_delay=50)
        keys = json.loads(server.layout.key_file.read_text())
        resp = requests.post(
            f"{server.management_url}/token",
            params={"type": "inference"},
            timeout=10,
            headers={"Authorization": f"Bearer {keys['API']['key']}"},
        )
        assert resp.status_code == 200  # msnb still holds the old inference key
        answers = server.predict_many("echo", [{"n": i} for i in range(16)])
        assert [a["echo"] for a in answers] == [{"n": i} for i in range(16)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _timestamp(text: str) -> float:
    from msnb.engines.auth import _parse_time

    return _parse_time(text)


def test_deep_workdir_gets_short_worker_sockets_and_still_serves(tmp_path, archives):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with LocalServer(deep) as server:
        assert len(str(server.layout.tmp_dir / ".ts.sock.65535")) < 108
        server.register(archives["echo"])
        assert server.predict("echo", {"a": 1})["echo"] == {"a": 1}
    assert not processes_naming(server.layout.tmp_dir)
