"""Capture never crashes or stalls on a hostile runtime value: each is refused with an msnb CaptureError that names
the value, says what is wrong and gives a Hint, before anything is serialised or written."""

from __future__ import annotations

import time
import tracemalloc

import pytest
import torch

from msnb.capture.cells import capture
from msnb.errors import CaptureError

STALL_S = 10.0  # the walk takes well under a second (docs/hardening.md); the old code took 16-30 s or forever
POOL = [("cell 1", "import torch\nvalue = make()\n")]
CELL = "def init_function():\n    return torch.nn.Identity()\n\ndef preprocess(sample):\n    return value\n"


def refused(value, **config) -> CaptureError:
    """Capture a handler that uses ``value``; the CaptureError it raises (and that it did not stall)."""
    start = time.monotonic()
    with pytest.raises(CaptureError) as err:
        capture("m", CELL, POOL, namespace={"value": value}, **config)
    assert time.monotonic() - start < STALL_S
    assert "`value` (used on" in err.value.message and err.value.hint
    return err.value


def cyclic_list():
    value = [1, [2]]
    value[1].append(value)
    return value


def cyclic_dict():
    value = {"a": {"b": 1}}
    value["a"]["back"] = value
    return value


def nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


class SlowKey:
    """A dict key whose repr would stall capture (it records the call instead of sleeping)."""

    called = False

    def __repr__(self) -> str:
        SlowKey.called = True
        time.sleep(30)
        return "slow"


@pytest.mark.parametrize(
    ("make", "says", "hint"),
    [
        (cyclic_list, r"holds [1][1], the list that contains it again (a cycle)", "contains itself"),
        (cyclic_dict, r"holds ['a']['back'], the dict that contains it again (a cycle)", "contains itself"),
        (lambda: nested(100_000), "is nested more than 100 levels deep (at [0][0]", "flatten it"),
        (lambda: [0] * 20_000_000, "holds more than 1,000,000 entries (20,000,000)", "torch.tensor(values)"),
        (lambda: torch.empty(2, 3, device="meta"), "is a meta tensor [2, 3] (it has no data)", "materialise it"),
        (lambda: torch.eye(3).to_sparse(), "is a sparse tensor (sparse_coo)", "to_dense()"),
        (lambda: {"w": torch.eye(3).to_sparse_csr()}, "holds ['w'], a sparse tensor (sparse_csr)", "to_dense()"),
    ],
    ids=["cyclic-list", "cyclic-dict", "100k-deep", "20M-ints", "meta-tensor", "sparse-coo", "sparse-csr-in-dict"],
)
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_hostile_value_is_refused_with_what_is_wrong_and_a_hint(make, says, hint):
    err = refused(make())
    assert says in err.message and hint in err.hint


def test_a_dict_key_is_named_by_its_type_never_by_its_repr():
    SlowKey.called = False
    err = refused({SlowKey(): 1})
    assert "has a key <test_hostile_values.SlowKey object> of type test_hostile_values.SlowKey" in err.message
    assert not SlowKey.called


def test_bytes_over_the_limit_are_refused_by_length_before_any_copy():
    value = b"\0" * (2**20 + 1)  # the 3 GB case, over a 1 MB limit
    tracemalloc.start()
    try:
        err = refused(value, max_value_mb=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "holds at least 1.0 MB, over the 1 MB limit" in err.message and "--max-value-mb" in err.hint
    assert peak < 2**20  # nothing was serialised: no copy of the value


def test_text_over_the_limit_is_measured_in_chunks_not_encoded_whole():
    value = ["é" * (2**19 + 1)]  # 2 bytes a character in UTF-8: just over 1 MB
    tracemalloc.start()
    try:
        err = refused(value, max_value_mb=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "over the 1 MB limit (at [0])" in err.message
    assert peak < 2**20 * 2


def test_a_long_key_is_shown_truncated():
    err = refused({"k" * 10_000: {1, 2}})
    assert "holds ['" + "k" * 17 + "..." + "k" * 18 + "'], a set" in err.message and len(err.message) < 600


def test_the_same_list_twice_is_no_cycle_and_travels():
    shared = [1.0, 2.0]
    spec = capture("m", CELL, POOL, namespace={"value": {"a": shared, "b": shared, "c": nested(50)}})
    assert spec.values.names == ("value",)
