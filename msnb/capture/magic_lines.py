"""Magics as people type them: a ``# comment`` after msnb's magic line, comment or blank lines above a cell magic.

IPython reads ``%ms_serve tiny  # note`` as the arguments ``tiny  # note`` and accepts a cell magic only on a cell's
first line. One input transformer (registered by ``%load_ext msnb``) and the notebook-file reader both go through
the functions here, so a cell means the same live and on export.
"""

from __future__ import annotations

import re

_MSNB_LINE_MAGIC = re.compile(r"^\s*(?:[\w.]+\s*=\s*)?%%?ms_\w+")


def without_comment(line: str) -> str:
    """``line`` without a trailing ``# comment``: a ``#`` that starts a word, outside quotes (shell-like arguments:
    ``--data '{"tag": "#1"}'`` keeps its ``#``)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"':
                continue
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip("\n")


def cell_magic_first(lines: list[str]) -> list[str]:
    """A cell whose first code line is a cell magic, with the comment and blank lines above it moved just below it
    (the cell's line numbers stay as the user sees them: msnb runs the body under one line standing for the magic)."""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            if i and stripped.startswith("%%"):
                return [line, *lines[:i], *lines[i + 1 :]]
            return lines
    return lines


def msnb_lines(lines: list[str]) -> list[str]:
    """IPython's cleanup transformer: a cell magic below comments moved up, msnb magic lines without their comment."""
    lines = cell_magic_first(lines)
    if lines and lines[0].lstrip().startswith("%%") and not lines[0].lstrip().startswith("%%ms_"):
        return lines  # another cell magic's body is not Python: leave it alone
    return [_strip(line) for line in lines]


def _strip(line: str) -> str:
    if not _MSNB_LINE_MAGIC.match(line):
        return line
    ending = "\n" if line.endswith("\n") else ""
    return without_comment(line) + ending
