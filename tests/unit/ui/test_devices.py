"""The device inventory from injected NVML facts: GPUs listed with memory, no NVML -> CPU with a note."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from msnb.ui.widget.devices import Inventory, check_max_gpu_memory, list_devices

MB = 1024 * 1024


class FakeNVML:
    """The few pynvml functions list_devices calls, over a list of (name, total_mb, free_mb)."""

    def __init__(self, gpus, fail_init: Exception | None = None):
        self.gpus, self.fail_init, self.shut_down = gpus, fail_init, False

    def nvmlInit(self):
        if self.fail_init:
            raise self.fail_init

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle):
        _, total, free = self.gpus[handle]
        return SimpleNamespace(total=total * MB, free=free * MB, used=(total - free) * MB)

    def nvmlShutdown(self):
        self.shut_down = True


def two_gpus() -> Inventory:
    return list_devices(FakeNVML([(b"NVIDIA A100-SXM4-40GB", 40960, 40000), ("NVIDIA T4", 15360, 15000)]))


def test_one_entry_per_gpu_with_name_and_memory_then_cpu():
    nvml = FakeNVML([(b"NVIDIA A100-SXM4-40GB", 40960, 40000), ("NVIDIA T4", 15360, 15000)])
    inv = list_devices(nvml)
    assert [d.key for d in inv.devices] == ["auto", "gpu:0", "gpu:1", "cpu"]
    assert inv.devices[1].label == "GPU 0: NVIDIA A100-SXM4-40GB (40000 / 40960 MB free)"
    assert (inv.devices[2].total_mb, inv.devices[2].free_mb, inv.devices[2].kind) == (15360, 15000, "gpu")
    assert inv.note is None and nvml.shut_down


def test_nvml_not_available_means_cpu_only_with_a_note():
    import pynvml

    inv = list_devices(FakeNVML([], fail_init=pynvml.NVMLError_LibraryNotFound()))
    assert [d.key for d in inv.devices] == ["auto", "cpu"]
    assert "NVML is not available" in inv.note and "Hint:" in inv.note


def test_driver_present_but_no_gpu_is_a_note_not_an_error():
    inv = list_devices(FakeNVML([]))
    assert [d.key for d in inv.devices] == ["auto", "cpu"] and "No GPU found" in inv.note


def test_real_pynvml_on_this_machine_never_raises():
    inv = list_devices()
    assert inv.get("cpu") is not None and inv.get("auto") is not None
    if not inv.gpus:
        assert inv.note


def test_options_feed_a_dropdown_and_spec_devices_map_to_choices():
    inv = two_gpus()
    assert inv.options()[0] == ("auto (a GPU if there is one, else CPU)", "auto")
    assert inv.key_for("gpu") == "gpu:0" and inv.key_for("cpu") == "cpu" and inv.key_for("auto") == "auto"
    assert list_devices(FakeNVML([])).key_for("gpu") == "cpu"


@pytest.mark.parametrize(
    "max_mb, key, expected",
    [
        (None, "cpu", None),
        (15000, "gpu:1", None),
        (16000, "gpu:1", "above GPU 1's total of 15360 MB"),
        (16000, "gpu:0", None),
        (40000, "auto", None),  # auto: the largest GPU
        (50000, "auto", "above GPU 0's total of 40960 MB"),
        (1000, "cpu", "the device is CPU"),
    ],
)
def test_max_gpu_memory_against_the_chosen_gpu(max_mb, key, expected):
    problem = check_max_gpu_memory(max_mb, key, two_gpus())
    if expected is None:
        assert problem is None
    else:
        assert expected in problem and "Hint:" in problem


def test_max_gpu_memory_with_auto_and_no_gpu_is_an_error():
    problem = check_max_gpu_memory(1000, "auto", list_devices(FakeNVML([])))
    assert "no GPU was found" in problem and "Hint:" in problem
