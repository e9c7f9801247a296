"""The wheel ships every package of the source tree: pyproject.toml lists its packages by hand (the runtime package
lives under templates/, installed as msnb.templates), so a new folder left out of the list is missing only from an
installed msnb (`msnb shadow` and `msnb export --kserve` were, until this test)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_in_the_wheels_package_list():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            inside = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *inside)))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "these listed packages have no folder"
