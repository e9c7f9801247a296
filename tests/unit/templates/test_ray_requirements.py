"""An exported Ray application's requirements, installed once per node beside the model folders as TorchServe's
install_py_dep_per_model installs them into the model's folder: only what the node lacks, never a second torch."""

from __future__ import annotations

import sys

import pytest

from msnb.templates.msnb_runtime.ray.runtime_env import REQUIREMENTS_DIR, RequirementsError, install_once


def test_a_lacking_requirement_is_installed_once_beside_the_models_and_what_the_node_has_never(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = tmp_path / "out" / "model"
    folder.mkdir(parents=True)
    assert install_once(folder, ["numpy", "torch==1.0.0", "pyyaml>=5"]) is None  # all on the node: nothing
    target = install_once(folder, ["termcolor", "numpy"])  # a small package this environment lacks
    assert target is not None and target.parent == tmp_path / "out" / REQUIREMENTS_DIR and sys.path[0] == str(target)
    installed = sorted(p.name.split("-")[0] for p in target.glob("*.dist-info"))
    assert installed == ["termcolor"] and (target / "termcolor").is_dir()  # numpy, on the node, not again
    (target / "termcolor").rename(target / "moved")  # a second replica of the node finds it installed: no pip
    sys.path.remove(str(target))  # (as a new replica process starts without it)
    assert install_once(folder, ["termcolor"]) == target and not (target / "termcolor").exists()


def test_a_requirement_no_index_has_is_an_error_naming_it_with_a_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(RequirementsError, match="pip could not install msnb-absent-package-xyz==1.0 on this node") as e:
        install_once(tmp_path / "model", ["msnb-absent-package-xyz==1.0"])
    assert "Hint: make the package reachable from the nodes' package index" in str(e.value)
