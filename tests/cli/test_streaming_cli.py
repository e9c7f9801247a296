"""Streaming handlers on the command line: `msnb export --kserve` refuses them with the reason, `msnb export -o`
packs them, and `msnb predict --stream` prints a served stream's chunks as they arrive."""

from __future__ import annotations

import pytest
import torch
from charlm import HANDLER_BODY, MODEL_SOURCE, char_lm, greedy
from helpers import make_notebook, run

from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source

SEEDED = HANDLER_BODY.replace("    return CharLM(", "    torch.manual_seed(0)\n    return CharLM(")


def seeded_lm() -> torch.nn.Module:
    torch.manual_seed(0)
    return char_lm()(29).eval()


def test_export_kserve_refuses_a_streaming_handler_with_the_reason_and_writes_nothing(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", MODEL_SOURCE, "%%ms_handler gen\n" + SEEDED, weights=False)
    code, out, err = run(capsys, "export", nb, "--kserve", tmp_path / "kserve")
    assert code != 0
    assert "--kserve cannot carry streamed answers: gen (inference yields)" in err
    assert "one JSON document" in err and "Hint: serve a streaming handler" in err
    assert not (tmp_path / "kserve" / "model-store").exists()
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0, err
    assert (tmp_path / "out" / "gen.mar").is_file()


@pytest.mark.server
def test_msnb_predict_stream_prints_the_chunks_of_a_served_stream(tmp_path, capsys):
    with LocalServer(tmp_path / "server") as server:
        deploy(server, spec_from_source("gen", MODEL_SOURCE + SEEDED))
        (tmp_path / "prompt.json").write_text('"the cat"')
        argv = ["predict", "gen", "--data", f"@{tmp_path / 'prompt.json'}", "--stream", "--url", server.inference_url]
        code, out, err = run(capsys, *argv, "--token-file", server.layout.key_file)
    assert code == 0, err
    assert out == "".join(greedy(seeded_lm(), "the cat")) + "\n"
