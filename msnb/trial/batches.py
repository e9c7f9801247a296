"""How a test sends its samples: in batches of the handler's --batch-size, as the server forms them; a single
sample also as a batch of two; a batched forward that fell back to one sample at a time becomes a warning."""

from __future__ import annotations

import warnings
from typing import Any

from msnb.package.model_folder import ModelFolder
from msnb.spec import HandlerSpec
from msnb.trial import processes

DOUBLED = 2  # a single sample is also sent as a batch of this many copies of itself


class BatchFallbackWarning(UserWarning):
    """A batched forward failed; the handler answered one sample at a time (right answers, batching lost)."""


# Shown every time (not once per message, Python's default): each test that hits it should say so.
warnings.simplefilter("always", BatchFallbackWarning, append=True)


def run_like_server(folder: ModelFolder, samples: list, explain: Any = False) -> tuple[list, list[str]]:
    """Answer ``samples`` in ``folder``'s test process in batches of its batch size: (answers, log lines).

    With one sample to predict and a batch size over 1, the sample is also sent twice in one batch, so a
    forward that breaks on a batch shows before serving; its answers are not returned (not for a request of a
    stateful sequence, whose state would count it).
    """
    spec, worker = folder.spec, processes.worker_for(folder)
    flags = [explain] * len(samples) if isinstance(explain, bool) else list(explain)
    size = max(1, spec.batch_size)
    answers, log, fallbacks = [], [], []
    for start in range(0, len(samples), size):
        got, lines, fell_back = worker.run(samples[start : start + size], flags[start : start + size])
        answers += got
        log += lines
        fallbacks += fell_back
    # a request of a stateful sequence is sent once: a second copy would count in the sequence's state
    if len(samples) == 1 and size > 1 and not any(flags) and getattr(samples[0], "sequence", None) is None:
        fallbacks += worker.run(samples * DOUBLED, [False] * DOUBLED)[2]
    if fallbacks:
        warnings.warn(fallback_message(spec, fallbacks), BatchFallbackWarning, stacklevel=3)
    return answers, log


def fallback_message(spec: HandlerSpec, fallbacks: list[dict]) -> str:
    """The warning for the batch fallbacks one test saw: the first error, and what it costs on the server."""
    first = fallbacks[0]
    times = "" if len(fallbacks) == 1 else f" ({len(fallbacks)} batches)"
    return (
        f"{spec.name}: the batched forward of {first['size']} samples failed{times}: {first['error']}. "
        "The handler retried one sample at a time: the answers are right, but batching is lost (on the server: "
        "one forward per request, counted in %ms_status as batch fallbacks).\n"
        "Hint: make forward work on a batch (the first dimension is the batch: e.g. x.view(x.shape[0], -1), "
        "not x.view(1, -1)); run it in the notebook on torch.stack([x, x]) to see the error."
    )
