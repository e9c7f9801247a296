"""`msnb predict` sends requests as TorchServe's clients do: a file's raw bytes (`curl -T`), a Content-Type and headers
(`ts_request_sequence_id`), and refuses a missing file before sending anything."""

from __future__ import annotations

import pytest
from helpers import run

from msnb.capture.cells import capture
from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy

ECHO_REQUEST = """
def handle(data, context):
    if data is None:
        return None
    out = []
    for i, row in enumerate(data):
        body = row.get("body") or row.get("data")
        text = body.decode() if isinstance(body, (bytes, bytearray)) else body
        seq = context.get_request_header(i, "ts_request_sequence_id")
        out.append({"kind": type(body).__name__, "text": text, "seq": seq})
    return out
"""


@pytest.mark.server
def test_msnb_predict_sends_a_files_bytes_and_headers_as_curl_does(tmp_path, capsys):
    (tmp_path / "sample.txt").write_text('{"x": 1}')  # text that parses as JSON: still the file's bytes
    with LocalServer(tmp_path / "server") as server:
        deploy(server, capture("echo", ECHO_REQUEST, []))
        where = ("--url", server.inference_url, "--token-file", server.layout.key_file)
        argv = [
            "predict",
            "echo",
            "--data-binary",
            f"@{tmp_path / 'sample.txt'}",
            "--header",
            "ts_request_sequence_id:s1",
        ]
        code, out, err = run(capsys, *argv, *where)
        assert code == 0, err
        assert '"kind": "bytearray"' in out and '"seq": "s1"' in out and '"text": "{\\"x\\": 1}"' in out
        code, out, err = run(
            capsys, "predict", "echo", "--data", '{"x": 1}', "--header", "ts_request_sequence_id:s2", *where
        )
        assert code == 0, err
        assert '"kind": "dict"' in out and '"seq": "s2"' in out


def test_msnb_predict_refuses_a_missing_file_before_sending(tmp_path, capsys):
    code, _, err = run(capsys, "predict", "m", "--data-binary", "@nope.txt", "--url", "http://127.0.0.1:9")
    assert code != 0 and "nope.txt' does not exist; nothing was sent" in err and "Hint:" in err
    assert "Traceback" not in err
