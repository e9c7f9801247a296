"""docs/architecture.md is the map of the code: it names every module, and names none that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def code_files() -> set[str]:
    """msnb/ and templates/ modules, as the page writes them (a folder's __init__.py is the folder's own line)."""
    found = {p.relative_to(ROOT).as_posix() for d in ("msnb", "templates") for p in (ROOT / d).rglob("*.py")}
    return {f for f in found if not f.endswith("__init__.py")}


def named_on_the_page() -> set[str]:
    """The modules the layout block names: full paths, and ``name.py`` (or ``sub/name.py``) lines under a ``folder/``
    line, a folder inside another indented below it (``templates/`` > ``msnb_runtime/`` > ``handler/``)."""
    block = PAGE.read_text().split("## Layout", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, path) of the open folders, outermost first
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if m := re.match(r"^((?:msnb|templates)/(?:\S*/)?)\s", line + " "):
            folders = [(0, m.group(1))]
        elif m := re.match(r"^\s+([\w/]+/)\s", line + " "):
            folders = [f for f in folders if f[0] < indent] or folders[:1]
            folders.append((indent, folders[-1][1] + m.group(1)))
        if m := re.match(r"^((?:msnb|templates)/\S+\.py)\s", line + " "):
            named.add(m.group(1))
        elif (m := re.match(r"^\s+([\w/]+\.py)\s", line + " ")) and folders:
            inside = [f for f in folders if f[0] < indent] or folders[:1]
            named.add(inside[-1][1] + m.group(1))
    return named


def test_the_page_names_every_module():
    missing = sorted(code_files() - named_on_the_page())
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_page_names_no_module_that_does_not_exist():
    ghosts = sorted(named_on_the_page() - code_files() - {"msnb/__init__.py"})
    assert not ghosts, f"docs/architecture.md names {ghosts}, which do not exist"


def test_the_site_draws_its_diagrams_without_a_script_from_elsewhere():
    """A ```mermaid block needs mermaid.js from a CDN: offline it shows as raw text. Pictures are committed images."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert not [p.name for p in pages if "```mermaid" in p.read_text()]
    assert "](images/pipeline.svg)" in (ROOT / "docs" / "index.md").read_text()
    assert (ROOT / "docs" / "images" / "pipeline.svg").read_text().lstrip().startswith("<?xml")


def test_no_two_test_files_share_a_name():
    """pytest imports each test file by its name (no __init__.py in tests/): two of one name fail to collect."""
    names = [p.name for p in (ROOT / "tests").rglob("*.py") if p.name != "conftest.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []
