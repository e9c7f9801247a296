"""TorchServe's responseTimeout on a Ray Serve replica: a batch whose ``handle`` runs longer than the model-config's
``responseTimeout`` (seconds) gets the answer TorchServe's frontend gives, and the replica asks to be replaced, as
TorchServe restarts a worker that did not answer in time; and the bounded wait (``wait_while``) of a request held for a
model whose replicas start.

TorchServe 0.12 counts the time from when the batch reaches its worker (a request queued behind a slow batch is not
timed out by it), then kills the worker: every request of the batch gets the frontend's 500 ``Worker died.`` A Python
thread cannot be killed, so the replica answers the batch, lets the slow call run on, and fails its health check
(``check_health``): Serve stops it and starts a new one, which loads the model anew.
Depends on the standard library, handler.serving and msnb_runtime.ts.wire (copied beside the adapter), never on msnb.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ..handler.serving import DEFAULT_RESPONSE_TIMEOUT_S
from ..ts.wire import error_reply

# What TorchServe 0.12's frontend answers every request of a batch its worker did not answer in time (measured).
TIMED_OUT_STATUS, TIMED_OUT_MESSAGE = 500, "Worker died."


def response_timeout(config: dict) -> float:
    """The model-config's responseTimeout in seconds (TorchServe's default when absent or not positive)."""
    try:
        seconds = float(config.get("responseTimeout") or 0)
    except (TypeError, ValueError):
        seconds = 0
    return seconds if seconds > 0 else DEFAULT_RESPONSE_TIMEOUT_S


def timed_out(size: int) -> list[tuple[int, dict, bytes]]:
    """TorchServe's answer to each of the ``size`` requests of a batch that ran past responseTimeout."""
    return [error_reply(TIMED_OUT_STATUS, "InternalServerException", TIMED_OUT_MESSAGE)] * size


async def bounded(run: Callable[[Callable[[], None]], Any], seconds: float) -> Any:
    """``run(began)`` in a thread, where ``run`` calls ``began()`` once the model is its own (the batch reached the
    worker); its result, or TimeoutError when it runs more than ``seconds`` after ``began`` (it runs on regardless)."""
    loop = asyncio.get_running_loop()
    started: asyncio.Future = loop.create_future()

    def began() -> None:
        loop.call_soon_threadsafe(lambda: started.done() or started.set_result(None))

    task = asyncio.ensure_future(asyncio.to_thread(run, began))
    task.add_done_callback(lambda done: done.cancelled() or done.exception())  # a late failure, read and dropped
    await asyncio.wait([started, task], return_when=asyncio.FIRST_COMPLETED)
    return await asyncio.wait_for(asyncio.shield(task), seconds)


async def wait_while(condition: Callable[[], bool], bound_s: float, interval_s: float = 0.2) -> None:
    """Wait while ``condition()`` holds, at most ``bound_s`` seconds (then go on as it is)."""
    deadline = time.monotonic() + bound_s
    while condition() and time.monotonic() < deadline:
        await asyncio.sleep(interval_s)
