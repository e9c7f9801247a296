"""A full disk while serving a new version or reloading one: an msnb error with a hint, no partial folder, the old
version (generation) answers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from helpers import ANSWER_SOURCE, MLP_MODEL, mlp_model

from msnb.engines.store import safe_name
from msnb.engines.torchserve import LocalServer
from msnb.errors import BuildError, ServerError
from msnb.session.core import Session
from msnb.session.deployment import deploy
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


def fill(disk, leave: int) -> None:
    """Fill ``disk`` until it has about ``leave`` bytes free."""
    with open(disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    with open(disk / "filler", "r+b") as f:
        f.truncate(max(0, (disk / "filler").stat().st_size - leave))


def test_a_reload_on_a_full_disk_leaves_no_half_generation_and_the_old_one_answers(small_disk, tmp_path):
    checkpoint = tmp_path / "mlp.pt"
    torch.save(mlp_model(8).state_dict(), checkpoint)
    server = LocalServer(tmp_path / "server", model_store=small_disk / "store")
    session = Session(lambda engine, port: server)
    try:
        source = MLP_MODEL + (
            "\ndef preprocess(sample):\n    return torch.tensor(sample['x'], dtype=torch.float32)\n"
            "\ndef postprocess(output):\n    return {'tag': TAG}\n"
        )
        session.serve(session.add(spec_from_source("mlp", source.replace("TAG", "1"), checkpoint=str(checkpoint))))
        known = session.reloads.models["mlp"]
        fill(small_disk, leave=16 * 1024)  # the handler's own files fit, the checkpoint's copy does not
        with pytest.raises(ServerError) as err:
            session.serve(session.add(spec_from_source("mlp", source.replace("TAG", "2"), checkpoint=str(checkpoint))))
        assert "No space left on device" in err.value.message and "generations/2" in err.value.message
        assert "Generation 1 keeps serving" in err.value.message and "free space on that disk" in err.value.hint
        generations = known.model_dir / "generations"
        assert not generations.exists() or listing(generations) == [], "no generation, no partial folder"
        assert server.predict("mlp", {"x": [1.0, -2.0, 0.5, 3.0]}) == {"tag": 1}
    finally:
        session.stop()


BUILD_ON_FULL_TMP = """
import sys
import msnb
from msnb.errors import MsnbError
from msnb.spec import spec_from_source
try:
    msnb.build(spec_from_source("calc", sys.argv[1]), sys.argv[2])
except MsnbError as err:
    print(type(err).__name__, "|", err.message, "|", err.hint)
"""


def test_ms_build_with_a_full_tmpdir_is_an_msnb_error_and_leaves_nothing(small_disk, tmp_path):
    (small_disk / "tmp").mkdir()
    fill(small_disk, leave=16 * 1024)  # the fork server's socket fits, a staged handler does not
    done = subprocess.run(
        [sys.executable, "-c", BUILD_ON_FULL_TMP, ANSWER_SOURCE.format(answer="x"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(small_disk / "tmp")},
        timeout=300,
    )
    assert done.stdout.startswith("HandlerRunError | Could not write "), done.stdout + done.stderr
    assert "No space left on device" in done.stdout and "free space on that disk" in done.stdout
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() or listing(tmp_path / "out") == []
    assert listing(small_disk / "tmp") == []  # the test-process folder went with the process
