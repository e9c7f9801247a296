"""TorchServe's own handler features, pasted unchanged into a cell: a streamed answer through
`send_intermediate_predict_response`, a customized describe (`describe_handle`) and `/explanations` through
`get_insights` in eager mode. The truth is a plain TorchServe serving the same file; `%ms_test` (the test process)
and msnb's served answer must both say what it says."""

from __future__ import annotations

import torch
from captum.attr import LayerIntegratedGradients
from helpers import TS_DESCRIBED, TS_EAGER_MODEL, TS_EXPLAINED, TS_STREAMING, build_mar, eager_files, make_notebook, run

from msnb.capture.cells import capture
from msnb.capture.notebook import load_handlers
from msnb.session.deployment import deploy
from msnb.trial import runner


def customized(server, name: str):
    """The customizedMetadata of ``GET /models/NAME?customized=true`` (what TorchServe's describe shows)."""
    url = f"{server.management_url}/models/{name}"
    answer = server.client.call("GET", url, "management", params={"customized": "true"})
    assert answer.ok, answer.text
    return answer.json()[0]["customizedMetadata"]


def plain_pieces(server, name: str, body: bytes) -> list[bytes]:
    """The answer's body as the HTTP chunks a plain client (curl, requests) reads one at a time."""
    url = f"{server.inference_url}/predictions/{name}"
    resp = server.client.call(
        "POST", url, "inference", data=body, headers={"Content-Type": "application/json"}, stream=True
    )
    with resp:
        assert resp.status_code == 200, resp.text
        return list(resp.iter_content(None))


def test_a_streamed_answer_is_the_same_chunks_in_ms_test_in_predict_stream_and_on_plain_torchserve(
    tmp_path, clean_server
):
    clean_server.register(build_mar(tmp_path / "plain", "stream", TS_STREAMING))
    truth = [piece.decode() for piece in plain_pieces(clean_server, "stream", b'{"x": 1}')]
    assert truth == ["intermediate_response"] * 3 + ["hello world "]
    spec = capture("stream2", TS_STREAMING, [])
    assert runner.predict_in_process(spec, [{"x": 1}]) == [truth]  # %ms_test NAME: the chunks
    deploy(clean_server, spec)
    assert list(clean_server.predict_stream("stream2", {"x": 1})) == truth  # %ms_predict NAME --stream
    assert list(clean_server.predict_stream("stream", {"x": 1})) == truth  # the same client on plain TorchServe


def test_ms_test_describe_shows_the_customized_metadata_plain_torchserve_and_msnb_serve(tmp_path, clean_server):
    clean_server.register(build_mar(tmp_path / "plain", "described", TS_DESCRIBED))
    truth = customized(clean_server, "described")
    assert truth == {"labels": ["cat", "dog"], "input": "json"}
    spec = capture("described2", TS_DESCRIBED, [])
    assert runner.describe(spec) == truth  # %ms_test described2 --describe
    deploy(clean_server, spec)
    assert customized(clean_server, "described2") == truth
    assert (
        clean_server.predict("described2", {"x": 1})
        == clean_server.predict("described", {"x": 1})
        == {"echo": {"x": 1}}
    )


def test_explanations_of_a_base_handler_in_eager_mode_are_served_like_plain_torchserve(tmp_path, capsys, clean_server):
    plain = tmp_path / "plain"
    net, args = eager_files(plain)
    clean_server.register(build_mar(plain, "explained", TS_EXPLAINED, extra_args=args))
    cell = f"%%ms_handler explained2 --checkpoint {plain / 'w.pt'} --model-file TinyNet\n" + TS_EXPLAINED
    nb = make_notebook(tmp_path / "nb", TS_EAGER_MODEL, cell, weights=False)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--allow-files", plain)
    assert code == 0, err
    clean_server.register(tmp_path / "out" / "explained2.mar")
    spec = next(c.spec for c in load_handlers(nb) if c.spec.name == "explained2")
    lig = LayerIntegratedGradients(net, net.fc)
    for x in ([1, 2, 3, 4], [0.5, -1, 4, 2]):
        found = lig.attribute(
            torch.tensor([x], dtype=torch.float32), target=0, n_steps=16, attribute_to_layer_input=True
        )
        expected = [round(v, 4) for v in found[0].tolist()]
        served = clean_server.explain("explained2", {"x": x})
        assert served == clean_server.explain("explained", {"x": x}) == expected
        assert runner.predict_in_process(spec, [{"x": x}], explain=True) == [expected]  # %ms_test --explain
