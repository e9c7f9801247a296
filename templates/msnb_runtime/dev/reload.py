"""The local server's dev entry: serves the current generation of a handler and swaps in a new one between batches.

Only the notebook's local server registers this module (as the manifest handler of the model folder it
serves); archives built for export never carry it. A generation is one staged copy of the handler's files:
generation 1 is the model folder itself, generation N lives in ``generations/N/``. A reload request is an
ordinary inference request with the ``x-msnb-reload`` header set to the secret in ``.msnb-reload-secret``
(0600, written by the notebook's kernel): it travels through the model's queue, so every request queued
before it is answered by the old generation and every request after it by the new one.
Depends only on the standard library, never on msnb.
"""

from __future__ import annotations

import copy
import gc
import hmac
import importlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..handler.names import HANDLER_MODULE as ENTRY_MODULE

DEV_ENTRY = "dev_reload.py"  # the entry a folder's manifest names (templates/dev_reload.py), never in an archive
RELOAD_HEADER = "x-msnb-reload"
SECRET_FILE = ".msnb-reload-secret"
GENERATIONS = "generations"
CURRENT = "current"  # generations/current: the generation a (re)started worker loads
logger = logging.getLogger(__name__)


class Generation:
    """One loaded copy of the handler: its folder, the modules imported from it, and its ``handle``."""

    def __init__(self, number: int, directory: Path, modules: dict, handle: Any):
        self.number, self.directory, self.modules, self.handle = number, directory, modules, handle


class DevEntry:
    """``handle(None, ctx)`` loads the current generation; ``handle(batch, ctx)`` answers it, reloading on request."""

    def __init__(self) -> None:
        self.current: Generation | None = None
        self.model_dir: Path | None = None
        self.secret = b""

    def __call__(self, data: list | None, context: Any) -> list | None:
        if self.current is None:
            self._start(context)
        if data is None:
            return None
        reloads = [idx for idx in range(len(data)) if _header(context, idx) is not None]
        if not reloads:
            return self.current.handle(data, self._view(context))
        others = [idx for idx in range(len(data)) if idx not in reloads]
        answers: list = [None] * len(data)
        if others:  # the old generation answers the rest of the batch first
            for idx, answer in zip(others, self.current.handle([data[i] for i in others], self._view(context, others))):
                answers[idx] = answer
        for idx in reloads:
            answers[idx] = self._reload_request(data[idx], context, idx)
        return answers

    def _start(self, context: Any) -> None:
        self.model_dir = Path(context.system_properties["model_dir"]).resolve()
        secret = self.model_dir / SECRET_FILE
        self.secret = secret.read_bytes().strip() if secret.is_file() else b""
        number = _current_number(self.model_dir)
        if sys.argv[0].endswith("model_service_worker.py"):  # a TorchServe worker, not an in-process test
            # torch and TorchServe live as long as the worker: frozen, a full collection after each reload skips
            # them (~0.7 s -> milliseconds) and still frees the generations, which are all loaded after this.
            gc.freeze()
        self.current = load_generation(number, self._folder(number), context, None)

    def _folder(self, number: int) -> Path:
        return self.model_dir if number == 1 else self.model_dir / GENERATIONS / str(number)

    def _view(self, context: Any, indices: list[int] | None = None) -> Any:
        """The context as the generation sees it: its own folder as model_dir, only the requests it answers."""
        if self.current.directory == self.model_dir and indices is None:
            return context
        return view(context, self.current.directory, indices)

    def _reload_request(self, request: dict, context: Any, idx: int) -> dict:
        context.set_response_content_type(idx, "application/json")
        refused = self._refusal(request, context, idx)
        if refused:
            context.set_response_status(403, "reload refused", idx)
            return {
                "error": f"reload refused: {refused}",
                "hint": "only the notebook that serves this model reloads it.",
            }
        number = int(request["body"]["generation"])
        start = time.perf_counter()
        try:
            self.reload(number, context)
        except Exception as err:
            logger.exception(
                "msnb dev: generation %d failed to load; generation %d keeps serving", number, self.current.number
            )
            context.set_response_status(500, "reload failed", idx)
            hint = getattr(err, "hint", "the traceback in model_log.log shows where loading failed.")
            message = getattr(err, "message", f"{type(err).__name__}: {err}")
            return {"error": message, "hint": hint, "type": type(err).__name__, "serving": self.current.number}
        return {"generation": number, "seconds": round(time.perf_counter() - start, 4)}

    def _refusal(self, request: dict, context: Any, idx: int) -> str | None:
        sent = _header(context, idx)
        sent = sent.encode() if isinstance(sent, str) else bytes(sent or b"")
        if not self.secret or not hmac.compare_digest(sent.strip(), self.secret):
            return "the reload secret does not match"
        body = request.get("body") if isinstance(request, dict) else None
        number = body.get("generation") if isinstance(body, dict) else None
        if not isinstance(number, int) or number < 2 or not (self._folder(number) / f"{ENTRY_MODULE}.py").is_file():
            return f"no staged generation {number!r}"
        return None

    def reload(self, number: int, context: Any) -> None:
        """Load generation ``number`` and release the current one; on failure the current one stays."""
        old = self.current
        self.current = load_generation(number, self._folder(number), context, old)
        release(old)
        logger.info("msnb dev: generation %d serves (was %d)", number, old.number)


def load_generation(number: int, directory: Path, context: Any, previous: Generation | None) -> Generation:
    """Import ``handler_model`` from ``directory`` under fresh module objects and run its load call."""
    shadowed = _own_names(directory) | set(previous.modules if previous else ())
    hidden = {n: sys.modules.pop(n) for n in list(sys.modules) if n in shadowed or n.split(".")[0] in shadowed}
    before = set(sys.modules)
    sys.path.insert(0, str(directory))
    try:
        importlib.invalidate_caches()
        module = importlib.import_module(ENTRY_MODULE)
        module.handle(None, view(context, directory))  # init_function may import more of the folder's modules
        modules = {n: m for n, m in sys.modules.items() if n not in before and _inside(m, directory)}
    except BaseException:
        for name in set(sys.modules) - before:
            if _inside(sys.modules[name], directory):
                del sys.modules[name]
        sys.path.remove(str(directory))
        sys.modules.update(hidden)
        raise
    return Generation(number, directory, modules, module.handle)


def release(generation: Generation) -> None:
    """Drop a replaced generation: its folder leaves the import path (the first entry, the one loading put
    there: the model folder is on the worker's PYTHONPATH too), its objects are collected."""
    if str(generation.directory) in sys.path:
        sys.path.remove(str(generation.directory))
    sys.path_importer_cache.pop(str(generation.directory), None)
    generation.modules.clear()
    generation.handle = None
    gc.collect()


def view(context: Any, directory: Path, indices: list[int] | None = None) -> Any:
    """A shallow copy of TorchServe's context with ``directory`` as model_dir and only the requests ``indices``."""
    seen = copy.copy(context)
    props = dict(getattr(context, "_system_properties", None) or {})
    props["model_dir"] = str(directory)
    seen._system_properties = props
    if indices is not None:
        seen.request_processor = [context.request_processor[i] for i in indices]
        ids = context.request_ids or {}
        seen.request_ids = {pos: ids.get(i) for pos, i in enumerate(indices)}
    return seen


def _header(context: Any, idx: int) -> Any:
    try:
        return context.get_request_header(idx, RELOAD_HEADER)
    except Exception:  # a context without request headers
        return None


def _current_number(model_dir: Path) -> int:
    try:
        number = int((model_dir / GENERATIONS / CURRENT).read_text().strip())
    except (OSError, ValueError):
        return 1
    return number if (model_dir / GENERATIONS / str(number) / f"{ENTRY_MODULE}.py").is_file() else 1


def _own_names(directory: Path) -> set[str]:
    """The top-level modules and packages a generation's folder holds (this entry excepted)."""
    names = {p.stem for p in directory.glob("*.py")} | {p.parent.name for p in directory.glob("*/__init__.py")}
    return names - {Path(DEV_ENTRY).stem}


def _inside(module: Any, directory: Path) -> bool:
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or ()), None)
    return bool(where) and os.path.abspath(where).startswith(str(directory) + os.sep)


handle = DevEntry()
