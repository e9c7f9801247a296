"""A served version keeps the files it was built from: re-saving the notebook's checkpoint changes no answer,
and status says which file changed since the build."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import MLP_SOURCE, mlp_model, notebook_answer, processes_naming

from msnb.engines.torchserve import LocalServer
from msnb.session.core import Session, StaleModelWarning
from msnb.spec import spec_from_source

SAMPLE = {"x": [0.5, -1.0, 2.0, 0.25]}


@pytest.fixture
def session(tmp_path):
    workdir = tmp_path / "server"
    session = Session(lambda engine, port: LocalServer(workdir))
    yield session
    session.stop()
    assert not processes_naming(workdir)


def test_resaving_the_checkpoint_after_serve_changes_no_answer_and_status_names_the_file(session, tmp_path):
    original = mlp_model()
    with torch.no_grad():
        for p in original.parameters():
            p.add_(0.25)  # weights the init_function alone would not give: the answer proves the checkpoint's
    checkpoint = tmp_path / "model.pth"
    torch.save(original.state_dict(), checkpoint)
    session.add(spec_from_source("fixed", MLP_SOURCE, checkpoint=str(checkpoint), example=SAMPLE))
    session.serve("fixed")
    expected = notebook_answer(original, SAMPLE["x"], batched=False)
    assert session.predict("fixed", SAMPLE) == expected
    assert session.stale("fixed") is None

    other = mlp_model(hidden=8)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-3.0)
    torch.save(other.state_dict(), checkpoint)  # the same path, the same inode: what `torch.save` does
    assert notebook_answer(other, SAMPLE["x"], batched=False) != expected

    with pytest.warns(StaleModelWarning, match=r"'model\.pth' changed since fixed v1\.0 .* was built"):
        answer = session.predict("fixed", SAMPLE)
    assert answer == expected
    row = session.status()["handlers"]["fixed"]
    assert row["stale"] and "'model.pth' changed" in row["why"]


def test_a_checkpoint_saved_again_with_the_same_weights_is_not_stale(session, tmp_path):
    model = mlp_model()
    checkpoint = tmp_path / "model.pth"
    torch.save(model.state_dict(), checkpoint)
    session.add(spec_from_source("same", MLP_SOURCE, checkpoint=str(checkpoint), example=SAMPLE))
    session.serve("same")
    stat = checkpoint.stat()
    os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # saved again: same bytes, new mtime
    assert session.stale("same") is None
    assert session.predict("same", SAMPLE) == notebook_answer(model, SAMPLE["x"], batched=False)
