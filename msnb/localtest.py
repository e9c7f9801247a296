"""Run a rendered handler in-process against TorchServe's own Context: the server's code path, no Java."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml
from ts.context import Context, RequestProcessor

from msnb.archive import CHECKPOINT, CONFIG, stage
from msnb.errors import HandlerRunError
from msnb.render import HANDLER_MODULE
from msnb.spec import HandlerSpec


@dataclass(frozen=True)
class Answer:
    """One request's answer as TorchServe would send it: HTTP status and decoded body."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return self.status < 400


class LoadedHandler:
    """A handler_model.py imported under a unique name from a staged model dir, loaded once."""

    def __init__(self, spec: HandlerSpec, model_dir: Path):
        self.spec = spec
        self.model_dir = Path(model_dir)
        self.module = _import_isolated(self.model_dir / f"{HANDLER_MODULE}.py", self.model_dir)
        manifest = {"model": {"modelName": spec.name, "handler": f"{HANDLER_MODULE}.py"}}
        if (self.model_dir / CHECKPOINT).exists():
            manifest["model"]["serializedFile"] = CHECKPOINT
        config = yaml.safe_load((self.model_dir / CONFIG).read_text()) or {}
        self.context = Context(spec.name, str(self.model_dir), manifest, spec.batch_size, None, "msnb-local",
                               model_yaml_config=config)
        try:
            self.module.handle(None, self.context)
        except Exception as err:  # the user's init_function / checkpoint: show their message
            raise HandlerRunError(f"Handler {spec.name!r} failed to load: {type(err).__name__}: {err}",
                                  "fix init_function or the checkpoint; the same error would stop TorchServe's worker.") from err

    def run(self, samples: Iterable[Any]) -> list[Answer]:
        """Send ``samples`` as ONE batch, each decoded the way TorchServe decodes a request body."""
        batch = [{"body": _as_request_body(s)} for s in samples]
        self.context.request_processor = [RequestProcessor({}) for _ in batch]
        self.context.request_ids = {i: str(uuid.uuid4()) for i in range(len(batch))}
        out = self.module.handle(batch, self.context)
        if not isinstance(out, list) or len(out) != len(batch):
            raise HandlerRunError(f"Handler returned {type(out).__name__} for a batch of {len(batch)}.",
                                  "the shared handler must return one answer per request; please report this.")
        return [Answer(self.context.get_response_status(i)[0], _as_response(o)) for i, o in enumerate(out)]


def run_handler(spec: HandlerSpec, samples: Iterable[Any]) -> list[Answer]:
    """Stage ``spec`` in a temp dir, load it, and answer ``samples`` as one batch."""
    with tempfile.TemporaryDirectory(prefix="msnb-test-") as tmp:
        handler = LoadedHandler(spec, stage(spec, Path(tmp) / "model", temporary=True))
        return handler.run(list(samples))


def test_handler(spec: HandlerSpec, samples: Iterable[Any], *, raise_on_error: bool = True) -> list[Any]:
    """The answers (bodies) the server would give for ``samples``; a failed sample raises by default."""
    answers = run_handler(spec, samples)
    failed = [(i, a) for i, a in enumerate(answers) if not a.ok]
    if failed and raise_on_error:
        i, answer = failed[0]
        body = answer.body if isinstance(answer.body, dict) else {"error": answer.body}
        raise HandlerRunError(f"Sample {i} failed with status {answer.status}: {body.get('error')}",
                              body.get("hint") or "fix the handler or the input.")
    return [a.body for a in answers]


test_handler.__test__ = False  # not a pytest test, despite the name


def validate(spec: HandlerSpec) -> None:
    """Build-time check: the handler loads, and answers its example (when it has one) without error."""
    samples = [] if spec.example is None else [spec.example]
    with tempfile.TemporaryDirectory(prefix="msnb-validate-") as tmp:
        handler = LoadedHandler(spec, stage(spec, Path(tmp) / "model", temporary=True))
        answers = handler.run(samples) if samples else []
    for answer in answers:
        if not answer.ok:
            body = answer.body if isinstance(answer.body, dict) else {"error": answer.body}
            raise HandlerRunError(f"Handler {spec.name!r} rejected its example (status {answer.status}): {body.get('error')}",
                                  body.get("hint") or "fix the handler or the --example input.")


def _import_isolated(path: Path, model_dir: Path):
    name = f"msnb_local_{path.stem}_{uuid.uuid4().hex[:8]}"
    # The shared handler modules are imported fresh from this model dir, as a worker would.
    for mod in [m for m in sys.modules if m.startswith("msnb_") and not m.startswith("msnb_local_")]:
        del sys.modules[mod]
    sys.path.insert(0, str(model_dir))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as err:
        raise HandlerRunError(f"Importing the rendered handler failed: {type(err).__name__}: {err}",
                              "an import or top-level definition in the handler cell fails outside the notebook.") from err
    finally:
        sys.path.remove(str(model_dir))
    return module


def _as_request_body(sample: Any) -> Any:
    if isinstance(sample, (bytes, bytearray)):
        return bytearray(sample)
    if isinstance(sample, str):
        return sample
    return json.loads(json.dumps(sample))  # what the server's JSON decoding would hand over


def _as_response(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    if isinstance(obj, str):
        try:
            return json.loads(obj)
        except ValueError:
            return obj
    return json.loads(json.dumps(obj))
