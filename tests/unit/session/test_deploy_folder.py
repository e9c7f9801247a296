"""What an engine serves is the folder the trial ran and %ms_build packs: ``deploy.lay_out`` lays the staged folder out
as private copies and rewrites only its version and the requirements the server lacks (``model_folder.relabel``);
the laid-out folder answers what plain torch answers on the notebook's weights."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from helpers import MLP_SOURCE, file_digests, mlp_model, notebook_answer

from msnb.package import archive, formats, model_folder
from msnb.session.deployment import lay_out
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.names import API_CARD, CHECKPOINT, CONFIG, MANIFEST, REQUIREMENTS
from msnb.trial import runner

INPUTS = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 0.0]]
RELABELLED = {"handler_model.py", API_CARD, CONFIG, REQUIREMENTS, MANIFEST}  # what relabel may rewrite
REBUILT = {"handler_model.py", MANIFEST}  # the two a fresh build writes differently: its spec digest, its clock


def undated(manifest: Path) -> dict:
    """An archiver's manifest without its ``createdOn`` (a wall-clock second: two builds may straddle one)."""
    return {k: v for k, v in json.loads(manifest.read_text()).items() if k != "createdOn"}


@pytest.fixture
def spec(tmp_path):
    ckpt, notes = tmp_path / "mlp.pt", tmp_path / "notes.txt"
    torch.save(mlp_model(8).state_dict(), ckpt)
    notes.write_text("a file the handler may read")
    return spec_from_source(
        "mlp",
        MLP_SOURCE,
        checkpoint=str(ckpt),
        init_kwargs={"hidden": 8},
        example={"x": INPUTS[0]},
        extra_files=(str(notes),),
        requirements=("tabulate>=0.8",),
    )


def test_the_served_folder_is_the_tested_and_packed_folder_with_only_its_version_and_requirements_rewritten(
    spec, tmp_path
):
    folder = model_folder.staged(spec)
    runner.validate(folder)  # the trial runs this folder (a copy of links to it)
    assert model_folder.staged(spec) is folder, "staged once: the serve takes the folder the test ran"
    tested = file_digests(folder.path)
    packed = file_digests(archive.pack(folder, tmp_path / "out", fmt=formats.EXPORT_FORMAT))
    served = lay_out(folder, tmp_path / "store", "1.0-r2", ())

    assert served.name == "mlp-1.0-r2"
    laid = file_digests(served)
    same = {n for n in tested if n not in RELABELLED}
    assert same and {n: laid[n] for n in same} == {n: tested[n] for n in same} == {n: packed[n] for n in same}
    assert {CHECKPOINT, "notes.txt", "handler.py"} <= {Path(n).name for n in same}
    assert REQUIREMENTS not in laid and "useVenv" not in (served / CONFIG).read_text(), "the server lacks none"
    assert "useVenv: true" in (folder.path / CONFIG).read_text(), "the staged folder keeps every pin"
    handler, staged_handler = (p / "handler_model.py" for p in (served, folder.path))
    lines, staged_lines = handler.read_text().splitlines(), staged_handler.read_text().splitlines()
    assert [i for i, (a, b) in enumerate(zip(lines, staged_lines, strict=True)) if a != b] == [1]
    assert "version: 1.0-r2" in lines[1] and "version: 1.0 " in staged_lines[1]
    assert '"version 1.0-r2' not in (served / API_CARD).read_text()  # the handler's docstring describes it
    assert all(os.stat(served / n).st_ino != os.stat(folder.path / n).st_ino for n in same), "private copies"

    # The relabelled folder is what the former re-render from the spec wrote (bar the spec digest it names).
    rendered = archive.build(spec.replace(version="1.0-r2", requirements=()), tmp_path / "old", formats.SERVE_FORMAT)
    old = file_digests(rendered)
    assert {n: h for n, h in laid.items() if n not in REBUILT} == {n: h for n, h in old.items() if n not in REBUILT}
    assert undated(served / MANIFEST) == undated(rendered / MANIFEST)
    model = mlp_model(8)
    answers = runner.predict_in_process(
        model_folder.ModelFolder(served, "mlp", "1.0-r2", spec=spec), [{"x": x} for x in INPUTS]
    )
    assert answers == [notebook_answer(model, x) for x in INPUTS]


def test_a_card_without_a_docstring_names_the_served_version(tmp_path):
    bare = spec_from_source("bare", "import torch\n\ndef init_function():\n    return torch.nn.Identity()\n")
    served = lay_out(model_folder.staged(bare), tmp_path / "store", "1.0-r3", ())
    assert "(version 1.0-r3)" in (served / API_CARD).read_text()
    assert "(version 1.0)" in (model_folder.staged(bare).path / API_CARD).read_text()
