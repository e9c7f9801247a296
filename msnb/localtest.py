"""Run a rendered handler in-process against TorchServe's own Context: the server's code path, no Java."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import sys
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ts.context import Context, RequestProcessor

from msnb.archive import CHECKPOINT, CONFIG, stage
from msnb.errors import HandlerRunError
from msnb.render import HANDLER_MODULE
from msnb.spec import HandlerSpec
from msnb.torchserve.models import encode


@dataclass(frozen=True)
class Answer:
    """One request's answer as TorchServe would send it: HTTP status and decoded body."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return self.status < 400


class _LogCapture(logging.Handler):
    """Keeps the shared handler's log lines (as TorchServe's model_log.log would) instead of printing them."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(self.format(record).splitlines())


class LoadedHandler:
    """A handler_model.py imported under a unique name from a staged model dir, loaded once.

    Like a worker's import, the module is in ``sys.modules`` while it is used (dataclasses, pickle and
    typing look their module up there); ``close()`` takes it out again.
    """

    def __init__(self, spec: HandlerSpec, model_dir: Path):
        self.spec = spec
        self.model_dir = Path(model_dir)
        self.log = _LogCapture()
        self.module = _import_isolated(self.model_dir / f"{HANDLER_MODULE}.py", self.model_dir)
        try:
            self._load(spec)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        sys.modules.pop(self.module.__name__, None)

    def _load(self, spec: HandlerSpec) -> None:
        manifest = {"model": {"modelName": spec.name, "handler": f"{HANDLER_MODULE}.py"}}
        if (self.model_dir / CHECKPOINT).exists():
            manifest["model"]["serializedFile"] = CHECKPOINT
        config = yaml.safe_load((self.model_dir / CONFIG).read_text()) or {}
        self.context = Context(
            spec.name, str(self.model_dir), manifest, spec.batch_size, None, "msnb-local", model_yaml_config=config
        )
        try:
            with self._capturing():
                self.module.handle(None, self.context)
        except Exception as err:  # the user's init_function / checkpoint: show their message
            # The shared handler's HandlerLoadError carries .message/.hint (it cannot import msnb).
            message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
            hint = (
                getattr(err, "hint", None)
                or "fix init_function or the checkpoint; TorchServe's worker would fail the same way."
            )
            trace = None if hasattr(err, "hint") else "\n".join(_last_traceback(self.log.lines)) or None
            raise HandlerRunError(f"Handler {spec.name!r} failed to load: {message}", hint, details=trace) from err

    @contextlib.contextmanager
    def _capturing(self):
        loggers = [logging.getLogger(n) for n in ("msnb_handler", "msnb_load", "msnb_collate")]
        saved = [lg.propagate for lg in loggers]
        for lg in loggers:
            lg.addHandler(self.log)
            lg.propagate = False
        try:
            yield
        finally:
            for lg, prop in zip(loggers, saved):
                lg.removeHandler(self.log)
                lg.propagate = prop

    def run(self, samples: Iterable[Any]) -> list[Answer]:
        """Send ``samples`` as ONE batch, each decoded the way TorchServe decodes a request body."""
        batch = [{"body": _as_request_body(s)} for s in samples]
        self.context.request_processor = [RequestProcessor({}) for _ in batch]
        self.context.request_ids = {i: str(uuid.uuid4()) for i in range(len(batch))}
        with self._capturing():
            out = self.module.handle(batch, self.context)
        if not isinstance(out, list) or len(out) != len(batch):
            raise HandlerRunError(
                f"Handler returned {type(out).__name__} for a batch of {len(batch)}.",
                "the shared handler must return one answer per request; please report this.",
            )
        return [Answer(self.context.get_response_status(i)[0], _as_response(o)) for i, o in enumerate(out)]


def run_handler(spec: HandlerSpec, samples: Iterable[Any]) -> list[Answer]:
    """Stage ``spec`` in a temp dir, load it, and answer ``samples`` as one batch."""
    answers, _ = _run_staged(spec, list(samples))
    return answers


def predict_in_process(spec: HandlerSpec, samples: Iterable[Any], *, raise_on_error: bool = True) -> list[Any]:
    """The answers (bodies) the server would give for ``samples``; a failed sample raises by default."""
    answers, log = _run_staged(spec, list(samples))
    if raise_on_error:
        _raise_first_failure(spec, answers, log, what="Sample {i} failed with status {status}")
    return [a.body for a in answers]


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


def _run_staged(spec: HandlerSpec, samples: list[Any]) -> tuple[list[Answer], list[str]]:
    with tempfile.TemporaryDirectory(prefix="msnb-test-") as tmp:
        handler = LoadedHandler(spec, stage(spec, Path(tmp) / "model", temporary=True))
        try:
            answers = handler.run(samples) if samples else []
        finally:
            handler.close()
        return answers, handler.log.lines


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
        details = "\n".join(_last_traceback(log))
        raise HandlerRunError(
            f"{what.format(i=i, status=answer.status)}: {body.get('error')}",
            body.get("hint") or default_hint,
            details=details or None,
        )


def _last_traceback(lines: list[str]) -> list[str]:
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    return lines[starts[-1] :] if starts else []


def _import_isolated(path: Path, model_dir: Path):
    name = f"msnb_local_{path.stem}_{uuid.uuid4().hex[:8]}"
    # The shared handler modules are imported fresh from this model dir, as a worker would.
    for mod in [m for m in sys.modules if m.startswith("msnb_") and not m.startswith("msnb_local_")]:
        del sys.modules[mod]
    sys.path.insert(0, str(model_dir))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise HandlerRunError(
            f"Importing the rendered handler failed: {type(err).__name__}: {err}",
            "an import or top-level definition in the handler cell fails outside the notebook.",
        ) from err
    finally:
        sys.path.remove(str(model_dir))
    return module


def _as_request_body(sample: Any) -> Any:
    if isinstance(sample, (bytes, bytearray)):
        return bytearray(sample)
    if isinstance(sample, str):
        return sample
    return json.loads(encode(sample)[0])  # what the client sends and the server's JSON decoding hands over


def _as_response(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    if isinstance(obj, str):
        try:
            return json.loads(obj)
        except ValueError:
            return obj
    return json.loads(json.dumps(obj))
