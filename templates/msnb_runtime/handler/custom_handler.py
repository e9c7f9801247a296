"""Entry points for a user's own TorchServe handler (a class, or a module-level ``handle(data, context)``).

``handler_model.py`` binds one of these to the module-level name ``handle``, so TorchServe never falls back
to its class entry point (which needs exactly one class in the module). Load semantics are TorchServe's own
(ts/model_loader.py): a class is created with no arguments and ``initialize(context)`` runs once before the
first batch; a function gets ``handle(None, context)`` once. msnb adds only what packaging needs: extra-file
archives unpacked before loading, and load errors that name the missing file and the option that ships it.
Requests go to the user's code untouched (no per-sample isolation, no metrics); an answer whose Content-Type the
user's code did not set gets the shared handler's (``handler.content_type``). Depends on the standard library,
``handler.content_type`` and ``handler.load`` only.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from .content_type import label
from .load import HandlerLoadError, LoadSettings, check_server_torch, unpack_extra_files

TORCHSCRIPT_HINT = (
    "pass a TorchScript --checkpoint (torch.jit.save(torch.jit.script(model), 'model.pt'), or the "
    "scripted module itself); or, for BaseHandler's eager mode, name the notebook's nn.Module class with "
    "--model-file CLASS (it becomes the archive's model file, the checkpoint its state_dict); or override "
    "initialize to build the model and load a state_dict."
)
CHECKPOINT_HINT = (
    "the checkpoint comes with --checkpoint (it is the manifest's serializedFile and keeps its file name: "
    "read it from context.manifest['model']['serializedFile'] as BaseHandler does); any other file with "
    "--extra-files (it keeps its name, in context.system_properties['model_dir'])"
)


class ClassEntry:
    """``handle(data, context)`` over one instance of the user's handler class, initialised on the first call."""

    def __init__(self, cls: type):
        self.cls, self.service = cls, None

    def __call__(self, data: list | None, context: Any) -> list | None:
        if self.service is None:
            service = self.cls()
            _load(f"{self.cls.__name__}.initialize", lambda: service.initialize(context), context, self.cls)
            self.service = service
        if data is None:  # TorchServe's load call
            return None
        return _labelled(context, self.service.handle(data, context))


class FunctionEntry:
    """The user's module-level ``handle``: its load call (``data`` None) with extra files unpacked first."""

    def __init__(self, function: Any):
        self.function = function

    def __call__(self, data: list | None, context: Any) -> list | None:
        if data is None:
            return _load(f"{self.function.__name__}(None, context)", lambda: self.function(None, context), context)
        return _labelled(context, self.function(data, context))


def _labelled(context: Any, answers: Any) -> Any:
    """The answers, each with a Content-Type where the user's handler set none (as the shared handler's)."""
    label(context, answers)
    return answers


def _load(what: str, call: Any, context: Any, cls: type | None = None) -> Any:
    settings = LoadSettings.from_context(context)
    check_server_torch(settings.model_dir)
    unpack_extra_files(settings.model_dir, settings.extra_files)
    try:
        return call()
    except HandlerLoadError:
        raise
    except Exception as err:
        explained = explain(what, err, settings, _is_base_handler(cls))
        if explained is None:
            raise
        raise explained from err


def explain(what: str, err: BaseException, settings: LoadSettings, base_handler: bool) -> HandlerLoadError | None:
    """A HandlerLoadError naming the file a failed load wanted and the option that provides it, or None."""
    if isinstance(err, OSError) and err.filename:
        name = _relative(err.filename, settings.model_dir)
        return HandlerLoadError(f"{what} failed: {name!r} is not in the archive ({err.strerror}).", CHECKPOINT_HINT)
    if base_handler and not settings.checkpoint:
        return HandlerLoadError(
            f"{what} failed ({type(err).__name__}: {err}): BaseHandler.initialize loads the manifest's "
            "serializedFile, and this archive has no model file.",
            "pass --checkpoint (a TorchScript file for BaseHandler's own loading: "
            "torch.jit.save(torch.jit.script(model), 'model.pt')), or override initialize to build the model.",
        )
    if base_handler and any(f.name == "_load_torchscript_model" for f in traceback.extract_tb(err.__traceback__)):
        return HandlerLoadError(
            f"{what} failed: BaseHandler loads {settings.checkpoint} with torch.jit.load, and it is not "
            f"TorchScript ({type(err).__name__}: {str(err).split('. ')[0]}).",
            TORCHSCRIPT_HINT,
        )
    return None


def _is_base_handler(cls: type | None) -> bool:
    try:
        from ts.torch_handler.base_handler import BaseHandler
    except ImportError:
        return False
    return cls is not None and issubclass(cls, BaseHandler)


def _relative(filename: Any, model_dir: Path) -> str:
    path = Path(str(filename))
    try:
        return str(path.resolve().relative_to(Path(model_dir).resolve()))
    except ValueError:
        return str(filename)
