"""A stopped server leaves no scratch folder and no key file; predictions wait as long as the model may take."""

from __future__ import annotations

from helpers import ECHO, build_mar

from msnb.engines.inference_api import PREDICT_TIMEOUT
from msnb.engines.torchserve import LocalServer, TorchServeClient
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_RESPONSE_TIMEOUT_S


def test_stop_removes_the_socket_folder_outside_a_deep_workdir_and_the_key_file(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # worker sockets would not fit AF_UNIX's 108 bytes in here
    mar = build_mar(tmp_path / "mars", "echo", ECHO)
    server = LocalServer(deep)
    assert str(server.layout.tmp_dir).startswith("/tmp/msnb-ts-")
    with server:
        server.register(mar, response_timeout=3)
        batches, margin = PREDICT_TIMEOUT
        assert server.client.predict_timeout("echo") == batches * 3 + margin, "from the model's responseTimeout"
        assert server.predict("echo", {"m": 1})
        assert server.layout.tmp_dir.is_dir() and server.layout.key_file.is_file()
    assert not server.layout.tmp_dir.exists() and not server.layout.key_file.exists()


def test_a_server_that_cannot_be_described_gets_the_default_response_timeout():
    client = TorchServeClient("http://127.0.0.1:9")  # --url only: no management API to ask
    batches, margin = PREDICT_TIMEOUT
    assert client.predict_timeout("any") == batches * DEFAULT_RESPONSE_TIMEOUT_S + margin
