"""On the local Ray, as on TorchServe (tests/server/test_batch_fallback_and_explain_budget.py): a batch fallback
the replicas count (the Ray metrics they export) is the notebook's fallback count in %ms_status."""

from __future__ import annotations

import pytest
from helpers import BATCH_BUG_INPUTS, BATCH_ONLY_BUG, mlp_model, notebook_answer, poll

from msnb.spec import spec_from_source
from msnb.trial.batches import BatchFallbackWarning
from msnb.ui.display import Status

INPUTS = BATCH_BUG_INPUTS


@pytest.mark.timeout(300)
def test_a_forward_that_breaks_on_a_batch_is_counted_in_status_on_ray(ray_session):
    spec = spec_from_source(
        "rbatchbug", BATCH_ONLY_BUG, init_kwargs={"hidden": 8}, batch_size=4, max_batch_delay=300, example=INPUTS[0]
    )
    ray_session.add(spec)
    with pytest.warns(BatchFallbackWarning):
        ray_session.test("rbatchbug")  # the example is tested as a batch of two as well
    server = ray_session.serve("rbatchbug", engine="ray")

    def fell_back():  # concurrent requests, until Serve has batched some and Ray has exported the counter
        answers = server.client.predict_many("rbatchbug", INPUTS)
        assert answers == [notebook_answer(mlp_model(), x["x"]) for x in INPUTS]
        return ray_session.status()["handlers"]["rbatchbug"]["batch_fallbacks"] and ray_session.status()

    status = poll(fell_back, 120, "a batch fallback counted in the replicas' Ray metrics", interval=2)
    row = status["handlers"]["rbatchbug"]
    assert row["batch_fallbacks"] >= 1
    shown = Status(status).text()  # worded as on TorchServe (tests/server/test_batch_fallback_and_explain_budget.py)
    assert f"{row['batch_fallbacks']} batch fallback" in shown and "(see %ms_logs)" in shown
