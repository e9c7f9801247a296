"""The device inventory (NVML via pynvml): GPUs with their memory, plus CPU and "auto", never an exception."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from msnb.options import check_gpu_memory

_MB = 1024 * 1024


@dataclass(frozen=True)
class Device:
    """One choice in the device list: ``key`` is "auto", "cpu" or "gpu:<index>"."""

    key: str
    label: str
    index: int | None = None
    total_mb: int | None = None
    free_mb: int | None = None

    @property
    def kind(self) -> str:
        """The spec's device value for this choice: auto, cpu or gpu."""
        return "gpu" if self.key.startswith("gpu:") else self.key


@dataclass(frozen=True)
class Inventory:
    """The choices to offer, and a note when GPUs could not be listed (no NVML, no driver)."""

    devices: tuple[Device, ...]
    note: str | None = None

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind == "gpu")

    def options(self) -> list[tuple[str, str]]:
        """(label, key) pairs, as an ipywidgets Dropdown takes them."""
        return [(d.label, d.key) for d in self.devices]

    def get(self, key: str) -> Device | None:
        return next((d for d in self.devices if d.key == key), None)

    def key_for(self, spec_device: str) -> str:
        """The choice that shows a spec's device ("gpu" -> the first GPU; no GPU -> "cpu")."""
        if spec_device == "gpu":
            return self.gpus[0].key if self.gpus else "cpu"
        return spec_device if self.get(spec_device) else "auto"


def list_devices(nvml: Any = None) -> Inventory:
    """One entry per GPU NVML reports (name, free/total MB), then CPU; "auto" first.

    ``nvml`` is an object with pynvml's functions (``nvmlInit``, ``nvmlDeviceGetCount``,
    ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetName``, ``nvmlDeviceGetMemoryInfo``,
    ``nvmlShutdown``); tests pass a fake one. Any failure becomes a note and a CPU-only list.
    """
    auto = Device("auto", "auto (a GPU if there is one, else CPU)")
    cpu = Device("cpu", "CPU")
    try:
        gpus = _query(nvml if nvml is not None else _import_pynvml())
    except Exception as err:  # no library, no driver, or a broken one: CPU only
        note = (
            f"No GPU listed: NVML is not available ({err or type(err).__name__}). "
            "Hint: the model runs on CPU; install the NVIDIA driver (and nvidia-ml-py) to see GPUs here."
        )
        return Inventory((auto, cpu), note)
    note = None if gpus else "No GPU found by NVML: the model runs on CPU."
    return Inventory((auto, *gpus, cpu), note)


def check_max_gpu_memory(max_mb: int | None, key: str, inventory: Inventory) -> str | None:
    """Why ``max_mb`` (MB) does not fit the device choice ``key``, or None when it does."""
    if max_mb is None:
        return None
    device = inventory.get(key)
    problem = check_gpu_memory(max_mb, device.kind if device else "cpu", shown_as="CPU")
    if problem:
        return f"{problem}. Hint: clear the field, or choose a GPU or auto."
    if device.kind == "auto":
        if not inventory.gpus:
            return (
                "max GPU memory is set but no GPU was found (auto runs on CPU here). "
                "Hint: clear the field, or run on a machine with a GPU."
            )
        device = max(inventory.gpus, key=lambda d: d.total_mb or 0)
    if device.total_mb is not None and max_mb > device.total_mb:
        return (
            f"max GPU memory {max_mb} MB is above GPU {device.index}'s total of {device.total_mb} MB. "
            f"Hint: use at most {device.total_mb} (MB)."
        )
    return None


def _query(nvml: Any) -> list[Device]:
    nvml.nvmlInit()
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            total, free = int(mem.total) // _MB, int(mem.free) // _MB
            gpus.append(Device(f"gpu:{index}", f"GPU {index}: {name} ({free} / {total} MB free)", index, total, free))
        return gpus
    finally:
        nvml.nvmlShutdown()


def _import_pynvml() -> Any:
    import pynvml  # from nvidia-ml-py

    return pynvml
