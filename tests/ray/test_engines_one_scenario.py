"""One session scenario over both engines, no fakes (the ``Engine`` protocol, msnb.engines.protocol): add a handler,
serve it, predict and explain, read its status and its workers' log, see the batches a batching model's server
formed (the engine's metrics), change the cell and redeploy, predict again,
stop (on TorchServe; the shared Ray's stop is test_ray_notebook.py's). The folder served is the folder %ms_build
tested and packed, byte for byte; every answer is the notebook's own (plain torch on the same weights), whichever
engine serves it."""

from __future__ import annotations

import pytest
import torch
from helpers import MLP_SOURCE, file_digests, mlp_model, notebook_answer, poll

from msnb.engines.protocol import Engine
from msnb.engines.store import safe_name
from msnb.package import model_folder
from msnb.spec import spec_from_source
from msnb.ui.display import Status

INPUTS = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 0.0]]
SHIFTED = MLP_SOURCE.replace(
    "def postprocess(output):\n", "def postprocess(output):\n    print('postprocess printed', int(output.argmax()))\n"
).replace('"label": int(output.argmax())', '"label": int(output.argmax()) + 10')


@pytest.mark.timeout(600)
def test_the_session_scenario_serves_the_notebooks_answers_on_torchserve(session, tmp_path):
    server = scenario(session, "torchserve", tmp_path)
    session.stop()
    assert not server.running and server.pid is None


# On the shared Ray (tests/ray/conftest.py), not stopped here: a Ray that session.serve(..., engine="ray") starts is
# test_ray_door.py's (%ms_serve) and test_ray_notebook.py's killed kernel's, and its stop is test_ray_notebook.py's
# %ms_stop (every Ray process and the temp dir gone).
@pytest.mark.timeout(600)
def test_the_session_scenario_serves_the_notebooks_answers_on_ray(ray_session, tmp_path):
    scenario(ray_session, "ray", tmp_path)


def scenario(session, engine: str, tmp_path):
    """The scenario up to the stop, on ``engine``; returns the engine that served it."""
    spec = session.add(spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, example={"x": INPUTS[0]}))
    packed = file_digests(session.build("mlp", tmp_path))  # %ms_build: the staged folder, tested, then packed
    server = session.serve("mlp", engine=engine)
    assert isinstance(server, Engine) and server.kind == engine and server.running
    tested = file_digests(model_folder.staged(spec).path)  # the folder the build's test ran
    served = file_digests(server.store.root / safe_name("mlp", session.served["mlp"].version))
    assert len(tested) > 20 and {n: served[n] for n in tested} == tested == {n: packed[n] for n in tested}
    model = mlp_model()
    assert [session.predict("mlp", {"x": x}) for x in INPUTS] == [notebook_answer(model, x) for x in INPUTS]

    why = session.explain("mlp", {"x": INPUTS[1]})
    with torch.no_grad():  # Integrated Gradients' completeness on the notebook's model
        out, base = model(torch.tensor([INPUTS[1]]))[0], model(torch.zeros(1, 4))[0]
    target = int(out.argmax())
    assert abs(sum(why["attributions"]) - float(out[target] - base[target])) < 1e-2

    status = session.status()
    assert status["server"]["engine"] == engine and status["handlers"]["mlp"]["served"]

    def logged(text: str) -> None:  # Java writes TorchServe's log: poll, with a bound
        poll(lambda: text in session.logs("mlp", 400), 30, text, log=lambda: session.logs("mlp"))

    logged("msnb handler: MLP loaded on cpu")  # the shared handler's own log line (Java writes the log)
    batches_formed(session, server, model)

    session.add(spec_from_source("mlp", SHIFTED, init_kwargs={"hidden": 8}, example={"x": INPUTS[0]}))
    assert session.stale("mlp")  # the cell changed since it was served
    assert session.serve("mlp") is server  # a redeploy on the same engine
    label = notebook_answer(model, INPUTS[0])["label"]
    assert session.predict("mlp", {"x": INPUTS[0]})["label"] == label + 10
    logged(f"postprocess printed {label}")  # the handler's prints, as its log lines
    return server


def batches_formed(session, server, model) -> None:
    """A model served with --batch-size 4: concurrent requests form batches, which status reads from the metrics."""
    batched = spec_from_source("batched", MLP_SOURCE, init_kwargs={"hidden": 8}, batch_size=4, max_batch_delay=300)
    session.serve(session.add(batched))
    inputs = [{"x": [float(i), 1.0, 2.0, 3.0]} for i in range(8)]

    def formed() -> dict[int, int]:  # Ray exports its metrics every few seconds: poll, with a bound
        assert server.client.predict_many("batched", inputs) == [notebook_answer(model, x["x"]) for x in inputs]
        found = session.status()["handlers"]["batched"]["batches"]
        return {int(size): n for size, n in found.items() if int(size) > 1}

    sizes = poll(formed, 180, "a batch of more than one request in the engine's metrics")
    assert all(size <= 4 for size in sizes)
    assert "batches formed: size " in Status(session.status()).text() and session.batching("batched")
