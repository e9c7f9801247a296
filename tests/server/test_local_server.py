"""A user's loop against one real TorchServe: register, predict, bad inputs, redeploy, metrics, logs."""

from __future__ import annotations

import io

import pytest
import requests
from helpers import ANSWER_SOURCE, ECHO, build_mar

from msnb.engines.store import safe_name
from msnb.engines.torchserve import LocalServer, PredictionError
from msnb.errors import ServerError
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source


def test_every_address_is_loopback_and_ports_are_distinct(server):
    config = (server.workdir / "config.properties").read_text()
    assert "0.0.0.0" not in config and "localhost" not in config
    assert config.count("127.0.0.1") >= 5
    assert len(set(server.ports.values())) == 5
    assert server.inference_url.startswith("http://127.0.0.1:")


def test_a_second_server_in_the_same_workdir_is_refused(server):
    config = (server.workdir / "config.properties").read_text()
    with pytest.raises(ServerError, match=r"Another TorchServe \(pid \d+\) already runs[\s\S]*Hint:"):
        LocalServer(server.workdir).start()
    assert (server.workdir / "config.properties").read_text() == config
    assert server.predict("echo", 1)["echo"] == 1


def test_token_auth_is_on_and_msnb_sends_the_key(server):
    without = requests.get(f"{server.inference_url}/ping", timeout=10)
    assert without.status_code == 400 and "InvalidKeyException" in without.text
    assert requests.get(f"{server.management_url}/models", timeout=10).status_code == 400
    assert server.predict("echo", {"a": 1}) == {"echo": {"a": 1}, "batch": 1}


def test_json_goes_as_json_and_bytes_or_files_as_binary(server):
    assert server.predict("echo", [1, "two", None])["echo"] == [1, "two", None]
    assert server.predict("echo", b"\x00abc") == b"cba\x00"
    assert server.predict("echo", io.BytesIO(b"xyz")) == b"zyx"
    assert server.explain("echo", {"why": 1})["echo"] == {"why": 1}


def test_data_that_cannot_be_sent_is_refused_with_a_hint(server):
    with pytest.raises(ServerError, match="Hint: pass JSON-able data"):
        server.predict("echo", {1, 2})


def test_predict_many_is_batched_by_torchserve(clean_server, archives, tmp_path):
    server = clean_server
    mar = build_mar(tmp_path, "batcher", (archives["echo"].parent / "echo_handler.py").read_text())
    server.register(mar, batch_size=4, max_batch_delay=500)
    answers = server.predict_many("batcher", [{"i": i} for i in range(8)])
    assert [a["echo"]["i"] for a in answers] == list(range(8))
    assert max(a["batch"] for a in answers) > 1
    server.unregister("batcher")
    assert "batcher" not in {m.name for m in server.models()}


def test_models_and_scale(clean_server, archives):
    server = clean_server
    server.register(archives["echo"])
    (echo,) = [m for m in server.models() if m.name == "echo"]
    assert echo.version == "1.0" and echo.is_default and echo.ready
    assert [w.status for w in server.scale("echo", 2).workers] == ["READY", "READY"]
    assert len(server.scale("echo", 1).workers) == 1


def test_a_refused_unregister_is_an_error_and_keeps_the_model_and_its_files(clean_server, archives, tmp_path):
    server = clean_server
    server.register(archives["echo"])
    v2 = build_mar(tmp_path, "echo", ECHO, version="2.0")
    server.register(v2)
    try:  # TorchServe refuses to remove the default version while another one is registered
        with pytest.raises(ServerError, match=r"Unregistering echo 1\.0 failed: HTTP 4\d\d[\s\S]*Hint:"):
            server.unregister("echo", "1.0")
        assert server.predict("echo", {"still": 1})["echo"] == {"still": 1}
        assert server.status("echo").version == "1.0"
    finally:
        server.unregister("echo", "2.0")
    assert [m.version for m in server.models()] == ["1.0"]


def test_unknown_model_or_version_lists_the_registered_models(server):
    with pytest.raises(ServerError, match=r"No model 'nope'.*registered: .*echo 1\.0[\s\S]*Hint:"):
        server.predict("nope", {"a": 1})
    with pytest.raises(ServerError, match=r"No model 'echo' version '9\.9'.*echo 1\.0"):
        server.predict("echo", {"a": 1}, version="9.9")


def test_the_handlers_own_4xx_message_reaches_the_caller(server):
    with pytest.raises(PredictionError) as info:
        server.predict("echo", {"reject": True})
    assert info.value.status == 422
    assert "sample rejected: 'reject' is set" in str(info.value)
    assert info.value.hint == "drop the 'reject' key"


def test_a_worker_dying_mid_request_is_an_error_then_the_worker_comes_back(server):
    with pytest.raises(PredictionError, match="Worker died") as info:
        server.predict("echo", {"die": True})
    assert info.value.status == 500 and "Hint:" in str(info.value)
    assert server.predict("echo", {"after": "death"})["echo"] == {"after": "death"}


def test_a_request_slower_than_response_timeout_fails_clearly_and_the_server_recovers(server):
    with pytest.raises(PredictionError) as info:
        server.predict("echo", {"sleep": 6})
    assert info.value.status == 500
    assert "response_timeout" in info.value.hint
    assert server.predict("echo", {"after": "timeout"})["echo"] == {"after": "timeout"}


def test_init_failure_shows_the_users_traceback_and_other_models_keep_serving(server, archives):
    with pytest.raises(ServerError) as info:
        server.register(archives["broken"])
    text = str(info.value)
    assert "Failed to start workers" in text and "Hint: the handler failed to load" in text
    assert "Traceback (most recent call last)" in text and "user error 42: weights do not match" in text
    assert "broken" not in {m.name for m in server.models()}
    assert server.predict("echo", {"still": "here"})["echo"] == {"still": "here"}


def test_import_error_shows_the_real_error_not_torchserves_fallback(server, archives):
    with pytest.raises(ServerError) as info:
        server.register(archives["importerror"])
    assert "No module named 'msnb_no_such_module_xyz'" in str(info.value)
    assert "ts.torch_handler" not in str(info.value)


def test_requirements_that_cannot_be_installed_fail_with_pips_message(server, archives, tmp_path):
    mar = build_mar(
        tmp_path, "badreq", "def handle(data, context):\n    return None\n", requirements=["requests==0.0.1"]
    )
    with pytest.raises(ServerError) as info:
        server.register(mar)
    text = str(info.value)
    assert "Custom pip package installation failed" in text and "Hint: a requirement could not be installed" in text
    assert "requests==0.0.1" in text
    assert "badreq" not in {m.name for m in server.models()}


def test_registering_the_same_version_twice_points_to_redeploy(server, archives):
    with pytest.raises(ServerError, match=r"already registered[\s\S]*redeploy"):
        server.register(archives["echo"])


def test_redeploy_serves_the_changed_handler_without_a_restart(clean_server):
    server = clean_server
    pid = server.pid
    deploy(server, spec_from_source("calc", ANSWER_SOURCE.format(answer="first")))
    assert server.predict("calc", {"x": [1, 2]}) == {"answer": "first", "sum": 3.0}
    status = deploy(server, spec_from_source("calc", ANSWER_SOURCE.format(answer="second")))
    assert status.is_default and status.ready and status.version != "1.0"
    assert server.predict("calc", {"x": [1, 2]}) == {"answer": "second", "sum": 3.0}
    assert [m.version for m in server.models() if m.name == "calc"] == [status.version]
    assert server.pid == pid
    assert not (server.model_store / safe_name("calc", "1.0")).exists()
    server.unregister("calc")


def test_metrics_are_parsed(server):
    server.predict("echo", {"m": 1})
    metrics = server.client.metrics()
    assert metrics["ts_inference_requests_total"]
    labels, value = metrics["ts_inference_requests_total"][0]
    assert value >= 1 and "model_name" in labels


def test_log_tail_shows_the_worker_output(server):
    assert "echo handler loaded" in server.log_tail(200)
