"""Streaming on the Ray engine from a notebook: the trained character LM's greedy generation streamed through the
router and a batched replica, two streams in one batch, and a client that leaves mid-stream closing the generator."""

from __future__ import annotations

import threading

from charlm import HANDLER_BODY, MODEL_SOURCE, TRAIN_SOURCE, greedy
from helpers import poll
from IPython.utils.capture import capture_output
from test_ray_notebook import cell

LONG_STEPS = 400  # a stream long enough that a client leaves while it is still being produced
SLOW = """
import time

def init_function():
    return CharLM(len(CHARS))

def inference(model, batch):
    done = 0
    try:
        for _ in range({steps}):
            time.sleep(0.01)  # a step of real work
            done += 1
            yield model(batch)[:, -1].argmax(-1)
    finally:
        with open({log!r}, "a") as log:
            log.write(f"{{done}}\\n")

def preprocess(prompt):
    return torch.tensor([STOI.get(c, 0) for c in prompt.lower()])

def postprocess(step):
    return CHARS[int(step)]
"""


def test_streams_on_ray_equal_the_notebooks_generation_batched_and_a_leaving_client_closes_its_generator(
    ip, ray_session, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    cell(ip, MODEL_SOURCE)
    cell(ip, TRAIN_SOURCE)
    cell(ip, f"%%ms_handler rgen --checkpoint lm.pth --batch-size 2 --max-batch-delay 2000\n{HANDLER_BODY}")
    cell(ip, f"%%ms_handler rslow --checkpoint lm.pth\n{SLOW.format(steps=LONG_STEPS, log=str(tmp_path / 'steps'))}")
    cell(ip, "%ms_serve rgen --engine ray")
    cell(ip, "%ms_serve rslow")
    own = {p: greedy(ip.user_ns["lm"].eval(), p) for p in ("the cat", "a dog sat on")}
    ip.user_ns["prompt"] = "the cat"
    with capture_output():
        assert ip.run_line_magic("ms_predict", "rgen --data prompt --stream") == own["the cat"]

    got = {}
    threads = [
        threading.Thread(target=lambda p=p: got.update({p: list(ray_session.predict_stream("rgen", p))})) for p in own
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {p: "".join(c) for p, c in got.items()} == {p: "".join(c) for p, c in own.items()}
    assert all(len(c) > 1 for c in got.values())  # each arrived in pieces, not as one whole answer

    stream = ray_session.predict_stream("rslow", "the cat")
    assert len(next(stream)) >= 1
    stream.close()  # the client leaves after its first chunk
    steps = tmp_path / "steps"
    assert poll(lambda: steps.is_file() and steps.read_text().strip(), 60, "the generator to be closed")
    assert int(steps.read_text().split()[0]) < LONG_STEPS
