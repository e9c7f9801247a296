"""Every answer on the server says what it is: JSON answers are application/json and bytes are sniffed,
from the shared handler and from a user's own handler alike (read from the HTTP response headers)."""

from __future__ import annotations

import json
import textwrap

import torch
from helpers import MLP_MODEL, MLP_SOURCE, mlp_model

from msnb.session.deployment import deploy
from msnb.spec import spec_from_source

PNG = b"\x89PNG\r\n\x1a\n" + bytes(8)
SAMPLE = {"x": [0.5, -1.0, 2.0, 0.25]}
ROLES_BYTES = MLP_MODEL + textwrap.dedent(f"""
    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {PNG!r}
""")
OWN_FUNCTION = textwrap.dedent(f"""
    def handle(data, context):
        if data is None:
            return None
        return [{PNG!r} if row["body"].get("png") else {{"n": len(data)}} for row in data]
""")


def answer_of(server, name: str, sample) -> tuple[str | None, bytes]:
    """The raw HTTP answer to ``sample``: its Content-Type header and its body."""
    url = f"{server.inference_url}/predictions/{name}"
    resp = server.client.call(
        "POST", url, "inference", data=json.dumps(sample).encode(), headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 200, resp.text
    return resp.headers.get("Content-Type"), resp.content


def test_json_text_and_bytes_answers_carry_their_content_type(clean_server):
    deploy(clean_server, spec_from_source("js", MLP_SOURCE))
    deploy(clean_server, spec_from_source("png", ROLES_BYTES))
    deploy(clean_server, spec_from_source("ownfn", OWN_FUNCTION))
    ctype, body = answer_of(clean_server, "js", SAMPLE)
    with torch.inference_mode():
        output = mlp_model()(torch.tensor(SAMPLE["x"]))
    assert ctype.startswith("application/json") and json.loads(body)["label"] == int(output.argmax())
    assert answer_of(clean_server, "png", SAMPLE) == ("image/png", PNG)
    ctype, body = answer_of(clean_server, "ownfn", {"png": False})
    assert ctype.startswith("application/json") and json.loads(body) == {"n": 1}
    assert answer_of(clean_server, "ownfn", {"png": True}) == ("image/png", PNG)


def test_a_body_that_is_not_json_is_answered_400_with_the_parsers_message(clean_server):
    deploy(clean_server, spec_from_source("js", MLP_SOURCE))
    url = f"{clean_server.inference_url}/predictions/js"
    resp = clean_server.client.call(
        "POST", url, "inference", data=b'{"x": [1, 2', headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"].startswith("the request body is not JSON: Expecting ")
