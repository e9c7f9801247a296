"""Run a rendered handler as the server would, without a server: in its test process (testworker), in batches
of its batch size (batchtest); a failed sample or load becomes an msnb error."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msnb.errors import HandlerRunError
from msnb.spec import HandlerSpec
from msnb.trial import batches, processes
from msnb.trial.worker import DESCRIBE, Answer, LoadedHandler, customized_metadata, last_traceback

__all__ = ["Answer", "LoadedHandler", "describe", "predict_in_process", "run_handler", "validate"]


def run_handler(spec: HandlerSpec, samples: Iterable[Any], explain: bool | Iterable[bool] = False) -> list[Answer]:
    """Answer ``samples`` as ONE batch in ``spec``'s test process (``explain``: see ``LoadedHandler.run``)."""
    samples = list(samples)
    return processes.worker_for(spec).run(samples, explain)[0] if samples else []


def predict_in_process(
    spec: HandlerSpec, samples: Iterable[Any], *, raise_on_error: bool = True, explain: bool = False
) -> list[Any]:
    """The answers (bodies) the server would give for ``samples`` (explanations with ``explain``), sent in
    batches of the handler's batch size (``batchtest``); a failed sample raises by default."""
    answers, log = _run_staged(spec, list(samples), explain)
    if raise_on_error:
        _raise_first_failure(spec, answers, log, what="Sample {i} failed with status {status}")
    return [a.body for a in answers]


def describe(spec: HandlerSpec) -> Any:
    """What ``GET /models/NAME?customized=true`` shows as ``customizedMetadata``: the handler's answer to the
    describe job (``describe_handle`` of a BaseHandler), run in ``spec``'s test process."""
    (answer,), log, _ = processes.worker_for(spec).run([], DESCRIBE)
    _raise_first_failure(spec, [answer], log, what=f"{spec.name}'s describe failed with status {{status}}")
    return customized_metadata(answer.body)


def validate(spec: HandlerSpec) -> None:
    """Build-time check: the handler loads, and answers its example (when it has one) without error."""
    answers, log = _run_staged(spec, [] if spec.example is None else [spec.example])
    _raise_first_failure(
        spec,
        answers,
        log,
        what=f"Handler {spec.name!r} rejected its example (status {{status}})",
        default_hint="fix the handler or the --example input.",
    )


def _run_staged(spec: HandlerSpec, samples: list[Any], explain: bool = False) -> tuple[list[Answer], list[str]]:
    """Load ``spec`` in its test process (a child: the kernel is left alone) and answer ``samples`` there."""
    if not samples:
        processes.worker_for(spec)  # loading is the check
        return [], []
    return batches.run_like_server(spec, samples, explain)


def _raise_first_failure(
    spec: HandlerSpec,
    answers: list[Answer],
    log: list[str],
    what: str,
    default_hint: str = "fix the handler or the input.",
) -> None:
    for i, answer in enumerate(answers):
        if answer.ok:
            continue
        body = answer.body if isinstance(answer.body, dict) else {"error": answer.body}
        details = "\n".join(last_traceback(log))
        streamed = "" if not answer.chunks else f" (after {len(answer.chunks)} chunks were sent)"
        raise HandlerRunError(
            f"{what.format(i=i, status=answer.status)}{streamed}: {body.get('error')}",
            body.get("hint") or default_hint,
            details=details or None,
        )
