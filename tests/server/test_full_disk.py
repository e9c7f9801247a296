"""A full disk while serving a new version: an msnb error with a hint, no partial folder, the old version answers."""

from __future__ import annotations

import subprocess

import pytest
import torch
from helpers import ANSWER_SOURCE

from msnb.engines.torchserve import LocalServer
from msnb.engines.torchserve.store import safe_name
from msnb.errors import BuildError, ServerError
from msnb.session.core import deploy
from msnb.spec import spec_from_source

DISK_MB = 16


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs (mounting needs root; elsewhere the test is skipped with the reason)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip() or done.returncode}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_full_disk_while_serving_a_new_version_leaves_nothing_and_the_old_version_answers(small_disk, tmp_path):
    big = tmp_path / "big.pt"  # on another filesystem than the store: staged by copying, which fills the disk
    torch.save({"w": torch.zeros(DISK_MB * 2**20 // 2)}, big)  # twice the disk's size
    with LocalServer(tmp_path / "server", model_store=small_disk / "store") as server:
        deploy(server, spec_from_source("calc", ANSWER_SOURCE.format(answer="first")))
        before = listing(small_disk / "store")
        with pytest.raises(BuildError) as err:
            deploy(server, spec_from_source("calc", ANSWER_SOURCE.format(answer="second"), checkpoint=str(big)))
        assert "No space left on device" in err.value.message and str(small_disk / "store") in err.value.message
        assert "free space on that disk" in err.value.hint
        assert listing(small_disk / "store") == before == [safe_name("calc", "1.0")], "no partial folder is left"
        assert server.predict("calc", {"x": [1, 2]}) == {"answer": "first", "sum": 3.0}


def test_registering_an_archive_on_a_full_disk_store_leaves_nothing(small_disk, tmp_path):
    folder = tmp_path / "model"
    (folder / "MAR-INF").mkdir(parents=True)
    (folder / "MAR-INF" / "MANIFEST.json").write_text('{"model": {"modelName": "big", "modelVersion": "1.0"}}')
    with open(folder / "model.pt", "wb") as f:
        f.truncate(2 * DISK_MB * 2**20)  # sparse here, copied for real into the store
    with LocalServer(tmp_path / "server", model_store=small_disk / "store") as server:
        with pytest.raises(ServerError) as err:
            server.register(folder)
        assert "No space left on device" in err.value.message and "Hint" in str(err.value)
        assert listing(small_disk / "store") == []
