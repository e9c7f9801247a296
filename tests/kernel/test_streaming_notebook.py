"""A notebook that trains a tiny character LM and streams its greedy generation: `%ms_test` returns the chunks,
`%ms_predict --stream` prints them as they arrive, two streams in one batch each get their own prompt's text.
The truth is the notebook's own generation (plain torch on the trained model)."""

from __future__ import annotations

import threading

import pytest
from charlm import HANDLER_BODY, MODEL_SOURCE, TRAIN_SOURCE, greedy
from IPython.utils.capture import capture_output

import msnb.session

pytestmark = [pytest.mark.kernel, pytest.mark.server]


@pytest.fixture
def notebook(ip, session, tmp_path, monkeypatch):
    """The LM defined and trained in the notebook (lm.pth written next to it), then the issue's handler cell."""
    monkeypatch.chdir(tmp_path)
    for cell in (
        MODEL_SOURCE,
        TRAIN_SOURCE,
        f"%%ms_handler gen --checkpoint lm.pth --batch-size 2 --max-batch-delay 3000\n{HANDLER_BODY}",
    ):
        with capture_output():
            result = ip.run_cell(cell, store_history=True)
        assert result.success, result.error_in_exec or result.error_before_exec
    return ip


def own_generation(shell, prompt: str) -> list[str]:
    return greedy(shell.user_ns["lm"].eval(), prompt)


def test_ms_test_returns_the_chunks_of_the_notebooks_own_greedy_generation(notebook):
    notebook.user_ns["prompt"] = "the cat"
    with capture_output():
        chunks = notebook.run_line_magic("ms_test", "gen --data prompt")
    assert chunks == own_generation(notebook, "the cat")


def test_ms_predict_stream_prints_the_chunks_as_they_arrive_and_returns_them(notebook):
    notebook.user_ns["prompt"] = "the dog"
    with capture_output() as served:
        assert notebook.run_cell("%ms_serve gen", store_history=True).success
    assert "(took " in str(served.outputs[-1].data) and "LocalServer" not in served.stdout + str(served.outputs)
    with capture_output() as shown:
        result = notebook.run_cell("%ms_predict gen --data prompt --stream", store_history=True)
    chunks, truth = result.result, own_generation(notebook, "the dog")
    assert chunks == truth and "".join(truth) in shown.stdout
    assert repr(truth) not in shown.stdout + str(shown.outputs)  # printed as they came, not again as a list
    arrived = list(msnb.session.current().predict_stream("gen", "the dog"))
    assert len(arrived) > 1 and "".join(arrived) == "".join(truth)  # pieces, not one whole answer


def test_two_concurrent_streams_at_batch_size_2_each_equal_their_own_prompts_generation(notebook):
    with capture_output():
        assert notebook.run_cell("%ms_serve gen", store_history=True).success
    prompts, got = ["the cat", "a dog sat on"], {}

    def ask(prompt: str) -> None:
        got[prompt] = list(msnb.session.current().predict_stream("gen", prompt))

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {p: "".join(c) for p, c in got.items()} == {p: "".join(own_generation(notebook, p)) for p in prompts}
