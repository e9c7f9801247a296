"""Run a model folder as the server would, without a server: in its test process (testworker), in batches of its
batch size (batchtest); a failed sample or load becomes an msnb error. Given a spec, each runs the folder staged from it
(``model_folder.staged``: once per generation, the folder a build then packs)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msnb.errors import HandlerRunError
from msnb.package.model_folder import ModelFolder, staged_or
from msnb.spec import HandlerSpec
from msnb.trial import batches, processes
from msnb.trial.worker import DESCRIBE, Answer, LoadedHandler, customized_metadata, last_traceback

__all__ = ["Answer", "LoadedHandler", "describe", "predict_in_process", "run_handler", "validate"]


Runnable = HandlerSpec | ModelFolder


def folder_of(what: Runnable) -> ModelFolder:
    """``what`` itself, or the folder staged from the spec (a full or read-only $TMPDIR: a clear error)."""
    return what if isinstance(what, ModelFolder) else staged_or(what, HandlerRunError)


def run_handler(what: Runnable, samples: Iterable[Any], explain: bool | Iterable[bool] = False) -> list[Answer]:
    """Answer ``samples`` as ONE batch in the folder's test process (``explain``: see ``LoadedHandler.run``)."""
    samples = list(samples)
    return processes.worker_for(folder_of(what)).run(samples, explain)[0] if samples else []


def predict_in_process(
    what: Runnable, samples: Iterable[Any], *, raise_on_error: bool = True, explain: bool = False
) -> list[Any]:
    """The answers (bodies) the server would give for ``samples`` (explanations with ``explain``), sent in
    batches of the handler's batch size (``batchtest``); a failed sample raises by default."""
    folder = folder_of(what)
    spec = folder.spec
    answers, log = _run_staged(folder, list(samples), explain)
    if raise_on_error:
        _raise_first_failure(spec, answers, log, what="Sample {i} failed with status {status}")
    return [a.body for a in answers]


def describe(what: Runnable) -> Any:
    """What ``GET /models/NAME?customized=true`` shows as ``customizedMetadata``: the handler's answer to the
    describe job (``describe_handle`` of a BaseHandler), run in the folder's test process."""
    folder = folder_of(what)
    spec = folder.spec
    (answer,), log, _ = processes.worker_for(folder).run([], DESCRIBE)
    _raise_first_failure(spec, [answer], log, what=f"{spec.name}'s describe failed with status {{status}}")
    return customized_metadata(answer.body)


def validate(what: Runnable) -> None:
    """Build-time check: the folder's handler loads, and answers its example (when it has one) without error."""
    folder = folder_of(what)
    spec = folder.spec
    answers, log = _run_staged(folder, [] if spec.example is None else [spec.example])
    _raise_first_failure(
        spec,
        answers,
        log,
        what=f"Handler {spec.name!r} rejected its example (status {{status}})",
        default_hint="fix the handler or the --example input.",
    )


def _run_staged(folder: ModelFolder, samples: list[Any], explain: bool = False) -> tuple[list[Answer], list[str]]:
    """Load ``folder`` in its test process (a child: the kernel is left alone) and answer ``samples`` there."""
    if not samples:
        processes.worker_for(folder)  # loading is the check
        return [], []
    return batches.run_like_server(folder, samples, explain)


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
        message = f"{what.format(i=i, status=answer.status)}{_streamed(answer)}: {body.get('error')}"
        trace = last_traceback(log)
        if trace and trace[-1].strip() and trace[-1].strip() in message:  # the exception line: said once, above
            trace = trace[:-1]
        typo = missing_role(spec)
        raise HandlerRunError(
            message + (f"\n{typo[0]}" if typo else ""),
            typo[1] if typo else body.get("hint") or default_hint,
            details="\n".join(trace) or None,
        )


def _streamed(answer: Answer) -> str:
    return "" if not answer.chunks else f" (after {len(answer.chunks)} chunks were sent)"


def missing_role(spec: HandlerSpec) -> tuple[str, str] | None:
    """A role the handler cell misspelled (``preprocces``): what that did, and the fix; None when none is."""
    miss = next(iter(spec.near_misses), None)
    if miss is None:
        return None
    return (
        f"Role `{miss.role}` was not found: the cell defines `{miss.name}` (line {miss.line}), which is no role, "
        f"so the handler ran without a {miss.role}.",
        f"rename `{miss.name}` to `{miss.role}` in the %%ms_handler cell and run it again.",
    )
