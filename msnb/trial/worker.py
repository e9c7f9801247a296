"""Load a staged model dir and drive its handle() with TorchServe's own Context, as a worker does (no Java)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import sys
import traceback
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ts
import yaml
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.utils.util import PredictionException

from msnb.engines.chunks import RecordedSocket, read_stream
from msnb.engines.models import RawRequest, encode
from msnb.engines.tracebacks import user_frames
from msnb.errors import HandlerRunError
from msnb.forms import MODEL_FILE, ROLES_FORM
from msnb.package.model_folder import checkpoint_name
from msnb.package.render import BLOCK_MARKER, HANDLER_MODULE
from msnb.spec import HandlerSpec
from msnb.templates import RUNTIME
from msnb.templates.msnb_runtime.handler.names import CONFIG
from msnb.trial.worker_imports import NoImports, WorkerImports

DESCRIBE = "describe"  # LoadedHandler.run's `explain` for a customized describe instead of a batch of samples


@dataclass(frozen=True)
class Answer:
    """One request's answer as TorchServe would send it: HTTP status and decoded body."""

    status: int
    body: Any
    chunks: tuple | None = None  # a streamed answer's chunks (body is their list, or the error that ended them)

    @property
    def ok(self) -> bool:
        return self.status < 400


class _LogCapture(logging.Handler):
    """Keeps the shared handler's log lines (as TorchServe's model_log.log would) instead of printing them."""

    def __init__(self, echo: Any = None) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.echo = echo  # a file that gets every line too (a test process's log, read after a crash)
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        self.lines.extend(text.splitlines())
        if self.echo is not None:
            self.echo.write(text + "\n")


class LoadedHandler:
    """A handler_model.py imported under a unique name from a staged model dir, loaded once.

    Like a worker's import, the module is in ``sys.modules`` while it is used (dataclasses, pickle and
    typing look their module up there); ``close()`` takes it out again. ``isolated`` hides the process's
    own local modules, path and cwd around every call (not needed in a test process, which is a worker's
    fresh process already); ``echo`` is a file that gets the handler's log lines too.
    """

    def __init__(self, spec: HandlerSpec, model_dir: Path, *, isolated: bool = True, echo: Any = None):
        self.spec = spec
        self.model_dir = Path(model_dir)
        self.log = _LogCapture(echo)
        self.imports = WorkerImports(self.model_dir) if isolated else NoImports()
        with self.imports:
            self.module = _import_isolated(self.model_dir / f"{HANDLER_MODULE}.py")
        try:
            with self.imports:
                self._load(spec)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        sys.modules.pop(self.module.__name__, None)

    def _load(self, spec: HandlerSpec) -> None:
        manifest = {"model": {"modelName": spec.name, "handler": f"{HANDLER_MODULE}.py"}}
        serialized = getattr(spec, "checkpoint_name", None) or checkpoint_name(spec)  # a test child's Loadable
        if (self.model_dir / serialized).exists():
            manifest["model"]["serializedFile"] = serialized
        if (self.model_dir / MODEL_FILE).exists():  # an eager BaseHandler's model class (msnb.forms)
            manifest["model"]["modelFile"] = MODEL_FILE
        config = yaml.safe_load((self.model_dir / CONFIG).read_text()) or {}
        self.context = Context(
            spec.name,
            str(self.model_dir),
            manifest,
            spec.batch_size,
            None,
            "msnb-local",
            metrics=_metrics_cache(),
            model_yaml_config=config,
        )
        try:
            with self._capturing():
                self.module.handle(None, self.context)
        except Exception as err:  # the user's init_function / checkpoint: show their message
            # The shared handler's HandlerLoadError carries .message/.hint (it cannot import msnb).
            message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
            what = "init_function or the checkpoint" if spec.form == ROLES_FORM else f"{spec.entry}'s loading"
            hint = (
                _missing_module_hint(err)
                or _missing_module_hint(err.__cause__)
                or getattr(err, "hint", None)
                or f"fix {what}; TorchServe's worker would fail the same way."
            )
            trace = None if hasattr(err, "hint") else "\n".join(last_traceback(self.log.lines)) or None
            raise HandlerRunError(f"Handler {spec.name!r} failed to load: {message}", hint, details=trace) from err

    @contextlib.contextmanager
    def _capturing(self):
        # the runtime the archive carries logs under its modules' names, as TorchServe's own code does
        loggers = [logging.getLogger(n) for n in (RUNTIME, "ts")]
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

    def run(self, samples: Iterable[Any], explain: bool | Iterable[bool] = False) -> list[Answer]:
        """Send ``samples`` as ONE batch, each decoded the way TorchServe decodes a request body.

        ``explain`` marks the requests sent to ``/explanations`` (all, or one flag per sample), with the
        request header TorchServe sets; ``DESCRIBE`` sends the job of ``GET /models/NAME?customized=true``.
        """
        if explain == DESCRIBE:  # the frontend's describe job: no body, the header `describe: True`
            batch, headers = [{}], [{"describe": "True"}]
        else:
            batch = [{"body": _as_request_body(s)} for s in samples]
            flags = [explain] * len(batch) if isinstance(explain, bool) else list(explain)
            sent = [s.headers if isinstance(s, RawRequest) else {} for s in samples]  # e.g. a sequence id
            headers = [{**h, "explain": str(bool(f))} for h, f in zip(sent, flags)]
        self.context.request_processor = [RequestProcessor(h) for h in headers]
        self.context.request_ids = {i: str(uuid.uuid4()) for i in range(len(batch))}
        self.context.metrics.request_ids = self.context.request_ids
        self.context.cl_socket = (
            RecordedSocket()
        )  # a streaming handler's intermediate responses (msnb_runtime.handler.stream)
        with self._capturing(), self.imports:
            out = self._handle(batch)
        if not isinstance(out, list) or len(out) != len(batch):
            raise HandlerRunError(*_batch_mismatch(self.spec, out, len(batch)))
        return [self._answer(i, o) for i, o in enumerate(out)]

    def _answer(self, idx: int, out: Any) -> Answer:
        """One request's answer; a streaming handler's answer is its chunks as a client reads them (msnb.engines.chunks)."""
        status = self.context.get_response_status(idx)[0]
        pieces = self.context.cl_socket.pieces().get(self.context.request_ids[idx], [])
        streaming = pieces or (getattr(self.module.handle, "streaming", False) and status < 400)
        if not streaming:
            return Answer(status, _as_response(out))
        chunks, error = read_stream(pieces, out)
        return Answer(500, error, tuple(chunks)) if error else Answer(200, chunks, tuple(chunks))

    def _handle(self, batch: list[dict]) -> Any:
        if self.spec.form == ROLES_FORM:  # the shared handler answers every sample, failed ones included
            return self.module.handle(batch, self.context)
        try:
            return self.module.handle(batch, self.context)
        except PredictionException as err:  # TorchServe answers every request of the batch with its status
            for i in range(len(batch)):
                self.context.set_response_status(err.error_code, err.message, i)
            return [err.message] * len(batch)
        except Exception as err:
            raise HandlerRunError(
                f"{self.spec.entry} raised {type(err).__name__}: {err}",
                "on TorchServe every request of this batch would fail (503); fix the handler or the input.",
                details=_user_frames(err),
            ) from err


def _metrics_cache() -> MetricsCacheYamlImpl:
    """TorchServe's own metrics cache with its default metrics.yaml, as a worker has (BaseHandler.handle uses it)."""
    cache = MetricsCacheYamlImpl(config_file_path=str(Path(ts.__file__).parent / "configs" / "metrics.yaml"))
    cache.initialize_cache()
    return cache


def _batch_mismatch(spec: HandlerSpec, out: Any, size: int) -> tuple[str, str]:
    """What TorchServe would answer to a handle() result that is not one answer per request, and the fix."""
    if spec.form == ROLES_FORM:
        return (
            f"Handler returned {type(out).__name__} for a batch of {size}.",
            "the shared handler must return one answer per request; please report this.",
        )
    got = f"a list of {len(out)}" if isinstance(out, list) else f"a {type(out).__name__}"
    served = "number of batch response mismatched" if isinstance(out, list) else "Invalid model predict output"
    return (
        f'{spec.entry} returned {got} for a batch of {size} request(s); TorchServe would answer 503 "{served}".',
        "return a list with exactly one answer per request in `data`, in the same order.",
    )


def _user_frames(err: BaseException) -> str:
    """The traceback of a user's handler from the rendered module down (not the trial's own frames)."""
    frames = traceback.extract_tb(err.__traceback__)
    start = next((i for i, f in enumerate(frames) if f.filename.endswith(f"{HANDLER_MODULE}.py")), 0)
    lines = traceback.format_list(frames[start:]) + traceback.format_exception_only(err)
    return "".join(lines).rstrip()


def last_traceback(lines: list[str]) -> list[str]:
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    return user_frames(lines[starts[-1] :]) if starts else []


def _missing_module_hint(err: BaseException) -> str | None:
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    return (
        f"a TorchServe worker imports the handler from the archive alone, where `{err.name.split('.')[0]}` is "
        "missing. msnb bundles local modules it finds by name on the notebook's path and pins installed "
        "third-party ones: import it by name (not by a computed name or from a path added at run time), ship its "
        "file with --extra-files, or install it in the kernel / add it to --requirements."
    )


def _import_isolated(path: Path):
    """Import handler_model.py from its model dir under a unique name (inside ``WorkerImports``)."""
    name = f"msnb_local_{path.stem}_{uuid.uuid4().hex[:8]}"
    # The shared handler modules are imported fresh from this model dir, as a worker would.
    for mod in [m for m in sys.modules if m.startswith("msnb_") and not m.startswith("msnb_local_")]:
        del sys.modules[mod]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise HandlerRunError(
            f"Importing the rendered handler failed{_where_in_cells(err, path)}: {type(err).__name__}: {err}",
            _missing_module_hint(err)
            or "module-level statements that travel with the handler run again when the worker imports it, without "
            "the notebook's folder or kernel: ship a file such a statement reads with --extra-files (the model folder "
            "is the worker's cwd), or build the value inside the handler's loading step.",
        ) from err
    return module


def _where_in_cells(err: BaseException, path: Path) -> str:
    """`` at `statement` (from cell In[3])``: the module-level line that failed, and the cell it came from."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
    if not frames or not frames[-1].lineno:
        return ""
    lines = path.read_text().splitlines()
    line = frames[-1].lineno
    marker = next((t for t in reversed(lines[: line - 1]) if t.startswith(BLOCK_MARKER)), "")
    origin = marker.removeprefix(BLOCK_MARKER).rstrip(" -")
    return f" at `{lines[line - 1].strip()}`" + (f" (from {origin})" if origin else "")


def _as_request_body(sample: Any) -> Any:
    if isinstance(sample, RawRequest):  # as a client sent it: %ms_test --data-binary / --header
        return sample.decoded()
    if isinstance(sample, (bytes, bytearray)):
        return bytearray(sample)
    if isinstance(sample, str):
        return sample
    return json.loads(encode(sample)[0])  # what the client sends and the server's JSON decoding hands over


def customized_metadata(body: Any) -> Any:
    """A describe answer as ``GET /models/NAME?customized=true`` shows it (``customizedMetadata``): the handler's
    text parsed as JSON when it is JSON, else the text itself (TorchServe's DescribeModelResponse)."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _as_response(obj: Any) -> Any:
    """The body as the server's client decodes it: bytes stay bytes, str stays str (sent as text/plain)."""
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    if isinstance(obj, str):
        return obj
    return json.loads(json.dumps(obj))
