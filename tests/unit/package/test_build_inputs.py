"""Files taken from the user's folder are private copies, and a changed one is found by its content."""

from __future__ import annotations

import os

import torch
from helpers import MLP_SOURCE, mlp_model

from msnb.files import clone_file, clone_tree
from msnb.package import build_inputs
from msnb.package.model_folder import ModelFolder
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.names import CHECKPOINT
from msnb.ui.display import Status


def test_a_clone_is_a_private_copy_that_a_later_write_to_the_source_does_not_reach(tmp_path):
    src, dst = tmp_path / "model.pth", tmp_path / "copy.pth"
    src.write_bytes(b"old weights" * 1000)
    how = clone_file(src, dst)
    assert how in {"clone", "kernel copy", "copy"}
    assert dst.read_bytes() == src.read_bytes() and not os.path.samefile(src, dst)
    with open(src, "r+b") as f:  # rewrite in place, as torch.save to the same path does
        f.write(b"NEW")
    assert dst.read_bytes().startswith(b"old weights")


def test_a_cloned_tree_shares_no_inode_with_its_source(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "vocab.txt").write_text("a b c")
    clone_tree(tmp_path / "src", tmp_path / "dst")
    copy = tmp_path / "dst" / "sub" / "vocab.txt"
    assert copy.read_text() == "a b c" and not os.path.samefile(copy, tmp_path / "src" / "sub" / "vocab.txt")


def test_a_served_model_dir_holds_copies_of_the_checkpoint_and_extra_files(tmp_path):
    checkpoint, labels = tmp_path / "model.pth", tmp_path / "labels.json"
    torch.save(mlp_model().state_dict(), checkpoint)
    labels.write_text('["a", "b", "c"]')
    spec = spec_from_source("fixed", MLP_SOURCE, checkpoint=str(checkpoint), extra_files=[str(labels)])
    model_dir = ModelFolder.stage(spec, tmp_path / "model").path
    for src, copy in ((checkpoint, model_dir / CHECKPOINT), (labels, model_dir / "labels.json")):
        assert copy.read_bytes() == src.read_bytes() and not os.path.samefile(src, copy)
    torch.save({"other": torch.zeros(1)}, checkpoint)
    assert torch.load(model_dir / CHECKPOINT, weights_only=True).keys() == mlp_model().state_dict().keys()


def test_what_a_build_took_is_changed_only_when_its_content_changed(tmp_path):
    checkpoint, labels = tmp_path / "model.pth", tmp_path / "labels.json"
    checkpoint.write_bytes(b"weights")
    labels.write_text("[]")
    spec = spec_from_source("t", MLP_SOURCE, checkpoint=str(checkpoint), extra_files=[str(labels)])
    files = build_inputs.taken_by(spec)
    assert [f.name for f in files] == ["model.pth", "labels.json"] and build_inputs.changed(files) == []
    st = checkpoint.stat()
    os.utime(checkpoint, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert build_inputs.changed(files) == []  # saved again with the same bytes
    checkpoint.write_bytes(b"weightz")  # same size, other bytes
    labels.unlink()
    assert [f.name for f in build_inputs.changed(files)] == ["model.pth", "labels.json"]
    assert build_inputs.describe(build_inputs.changed(files)) == "'model.pth' and 'labels.json'"


def test_the_digest_follows_the_checkpoints_content_not_its_mtime(tmp_path):
    checkpoint = tmp_path / "model.pth"
    checkpoint.write_bytes(b"weights")
    spec = spec_from_source("t", MLP_SOURCE, checkpoint=str(checkpoint))
    before = spec.digest()
    st = checkpoint.stat()
    os.utime(checkpoint, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert spec.digest() == before
    checkpoint.write_bytes(b"other weights")
    assert spec.digest() != before


def test_status_shows_why_a_served_version_is_stale():
    why = "'fixed' is stale: 'model.pth' changed since fixed v1.0 (digest abc) was built"
    handler = {"version": "1.0", "digest": "abc", "archives": [], "served": [], "stale": True, "why": why, "url": None}
    status = Status({"handlers": {"fixed": handler}, "server": {}})
    assert f"Warning: {why}" in status.text() and "model.pth&#x27; changed" in status._repr_html_()
