"""Model loading for the shared handler: safe extra-file unpacking, device choice, strict checkpoint loading.

Pure functions with injectable device facts so the GPU paths are testable without a GPU. Depends only on
torch and the standard library (shipped in every .mar beside ``handler/handler.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from .unpack import UnsafeArchiveError, unpack_archive

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

logger = logging.getLogger(__name__)
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
SECOND_TORCH_DIRS = ("torch", "venv")  # where TorchServe's per-model pip install puts packages, under MODEL_DIR


class HandlerLoadError(RuntimeError):
    """The model could not be loaded; the message names the cause and ends with a ``Hint:`` line."""

    def __init__(self, message: str, hint: str):
        self.message, self.hint = message, hint
        super().__init__(f"{message}\nHint: {hint}")


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    """What loading needs from TorchServe's context; a missing or empty model-config means defaults."""

    model_dir: Path
    gpu_id: Any = None
    device_type: str | None = None
    extra_files: list[str] = dataclasses.field(default_factory=list)
    max_gpu_memory: float | None = None
    checkpoint: str | None = None

    @classmethod
    def from_context(cls, context: Any) -> "LoadSettings":
        props = getattr(context, "system_properties", None) or {}
        config = getattr(context, "model_yaml_config", None) or {}
        system = config.get("system") or {}
        manifest = getattr(context, "manifest", None) or {}
        return cls(
            Path(props.get("model_dir") or "."),
            props.get("gpu_id"),
            config.get("deviceType"),
            list(system.get("extraFiles") or []),
            system.get("maxGPUMemory"),
            (manifest.get("model") or {}).get("serializedFile"),
        )


@dataclasses.dataclass
class DeviceFacts:
    """What the handler asks the machine about GPUs; tests inject fakes (there is no GPU on CI)."""

    cuda_available: Callable[[], bool] = torch.cuda.is_available
    total_memory_mb: Callable[[torch.device], float] = lambda device: (
        torch.cuda.get_device_properties(device).total_memory / 2**20
    )
    set_memory_fraction: Callable[[float, torch.device], None] = torch.cuda.set_per_process_memory_fraction


def check_server_torch(model_dir: Path, torch_file: str | None = None) -> None:
    """Refuse to serve with a torch that TorchServe's per-model install put in the model folder: ``pip install -t
    MODEL_DIR`` (a TorchServe without ``useVenv``) writes MODEL_DIR/torch, a model venv MODEL_DIR/venv/...; either
    way a requirement's dependency brought a second torch, which is not the server's (nor the notebook's)."""
    where = Path(torch_file or torch.__file__).resolve()
    try:
        first = where.relative_to(Path(model_dir).resolve()).parts[0]
    except ValueError:
        return
    if first in SECOND_TORCH_DIRS:
        raise HandlerLoadError(
            f"The worker imported torch {torch.__version__} from the model folder ({where.parent}), not the "
            "server's own: a requirement's dependency installed a second torch there.",
            "serve on TorchServe 0.10 or later, which honours the archive's `useVenv: true` and installs only what "
            "the server lacks, with the torch the notebook used; or install the requirements in the serving image.",
        )


def choose_device(gpu_id: Any, device_type: str | None, cuda_available: bool) -> torch.device:
    """``cuda:<gpu_id>`` when TorchServe assigned a GPU, CUDA works and deviceType is not "cpu"; else CPU."""
    if str(device_type or "").lower() == "cpu" or gpu_id is None or not cuda_available:
        if str(device_type or "").lower() == "gpu":
            logger.warning("deviceType is gpu but no GPU is available (gpu_id=%r); using the CPU", gpu_id)
        return torch.device("cpu")
    return torch.device(f"cuda:{int(gpu_id)}")


def gpu_memory_fraction(max_mb: float, total_mb: float) -> float:
    """The per-process memory fraction that caps this worker at ``max_mb`` of a ``total_mb`` GPU."""
    return min(1.0, float(max_mb) / float(total_mb))


def unpack_extra_files(model_dir: Path, names: list[str]) -> None:
    """Unpack every archive named in model-config ``system.extraFiles`` into the model dir, once."""
    if not names:
        return
    # All workers of a model share one extracted model dir: unpack under a lock, once per archive.
    with _locked(model_dir / ".msnb-unpack.lock"):
        for name in names:
            marker = model_dir / f".msnb-unpacked-{Path(name).name}"
            if not marker.exists():
                _unpack_named(model_dir, name)
                marker.touch()


def _unpack_named(model_dir: Path, name: str) -> None:
    path = model_dir / name
    if not name.endswith(ARCHIVE_SUFFIXES):
        raise HandlerLoadError(f"Extra file {name!r} is not an archive.", f"use one of {ARCHIVE_SUFFIXES}.")
    if not path.is_file():
        raise HandlerLoadError(
            f"Extra file {name!r} is not in the model dir {model_dir}.",
            "add it with --extra-files when building the .mar.",
        )
    try:
        unpack_archive(path, model_dir)
    except UnsafeArchiveError as err:
        raise HandlerLoadError(f"Extra file {err.message}", err.hint) from None
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as err:
        raise HandlerLoadError(
            f"Extra file {name!r} could not be unpacked: {err}", "check that the archive is complete and not corrupted."
        ) from err


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    if fcntl is None:  # not POSIX: no cross-process lock
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_checkpoint(model: torch.nn.Module, path: Path, device: torch.device) -> None:
    """Load a state_dict file into ``model`` strictly (``weights_only=True``), with a clear key report."""
    try:
        state = _read_state(path, device)
    except Exception as err:
        raise HandlerLoadError(
            f"Checkpoint {path.name} could not be loaded with weights_only=True: {err}",
            "save weights only: torch.save(model.state_dict(), path).",
        ) from err
    if not isinstance(state, dict):
        raise HandlerLoadError(
            f"Checkpoint {path.name} holds a {type(state).__name__}, not a state_dict.",
            "save weights only: torch.save(model.state_dict(), path).",
        )
    try:
        result = model.load_state_dict(state, strict=False, assign=_same_layout(model, state))
    except RuntimeError as err:  # shape mismatches raise even with strict=False
        raise HandlerLoadError(
            f"Checkpoint {path.name} does not fit the model: {err}",
            "build the model with the init kwargs used for training.",
        ) from err
    if result.missing_keys or result.unexpected_keys:
        raise HandlerLoadError(
            f"Checkpoint {path.name} does not match the model: missing keys {_keys(result.missing_keys)}, "
            f"unexpected keys {_keys(result.unexpected_keys)}.",
            "save model.state_dict() of the same class and init kwargs ('module.' prefixes come from "
            "DataParallel; a nested dict from a training checkpoint: save checkpoint['state_dict']).",
        )


def _read_state(path: Path, device: torch.device):
    """torch.load with mmap: the weights are paged in from the file instead of copied into memory."""
    try:
        return torch.load(path, map_location=device, weights_only=True, mmap=True)
    except RuntimeError:  # files in the legacy (pre-zip) format cannot be mmapped
        return torch.load(path, map_location=device, weights_only=True)


def _same_layout(model: torch.nn.Module, state: Any) -> bool:
    """True when every entry matches the model's own in shape and dtype, so the loaded tensors can
    replace the freshly initialised ones (assign) instead of being copied: one copy of the weights in
    memory, not two. Otherwise load_state_dict copies (and casts) as usual."""
    own = model.state_dict()
    return all(
        isinstance(v, torch.Tensor)
        and k in own
        and own[k].shape == v.shape
        and own[k].dtype == v.dtype
        and own[k].device == v.device
        for k, v in state.items()
    )


def _keys(keys: list[str], limit: int = 10) -> str:
    shown = ", ".join(keys[:limit])
    return f"[{shown}{f', ... ({len(keys)} in all)' if len(keys) > limit else ''}]"
