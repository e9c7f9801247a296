"""The README's install section names every extra pyproject.toml declares: a reader finds each by its name."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_names_every_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    named = {name for group in re.findall(r"\[([\w,-]+)\]", readme) for name in group.split(",")}
    assert set(extras) <= named, f"README.md does not name the extras {sorted(set(extras) - named)}"
