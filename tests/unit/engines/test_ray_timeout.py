"""responseTimeout on a Ray replica (templates/msnb_runtime/ray/timeout.py): a batch is timed from when it has the model, and
one that runs past the model-config's responseTimeout gets TorchServe's answer."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from msnb.templates.msnb_runtime.handler.serving import DEFAULT_RESPONSE_TIMEOUT_S
from msnb.templates.msnb_runtime.ray.timeout import bounded, response_timeout, timed_out


def test_the_timeout_is_the_model_configs_response_timeout_else_torchserves_default():
    assert response_timeout({"responseTimeout": 2}) == 2
    assert response_timeout({}) == response_timeout({"responseTimeout": 0}) == DEFAULT_RESPONSE_TIMEOUT_S
    assert response_timeout({"responseTimeout": "x"}) == DEFAULT_RESPONSE_TIMEOUT_S


def test_each_request_of_a_timed_out_batch_gets_torchserves_500_worker_died():
    answers = timed_out(3)
    assert len(answers) == 3 and {a[0] for a in answers} == {500}
    assert json.loads(answers[0][2]) == {"code": 500, "type": "InternalServerException", "message": "Worker died."}


def test_a_batch_waiting_for_the_model_is_not_timed_until_it_has_it():
    held = threading.Event()

    def run(began):  # waits for the model (another batch holds it) longer than the timeout, then answers at once
        held.wait(5)
        began()
        return "answered"

    async def scenario():
        asyncio.get_running_loop().call_later(0.3, held.set)
        return await bounded(run, 0.2)

    assert asyncio.run(scenario()) == "answered"


def test_a_handler_running_past_the_timeout_after_it_began_times_out_and_runs_on():
    release = threading.Event()

    def run(began):
        began()
        release.wait(5)
        return "late"

    async def scenario():
        with pytest.raises(TimeoutError):
            await bounded(run, 0.1)
        release.set()

    asyncio.run(scenario())
