"""Tracebacks point at the user's cells: a frame in the rendered handler_model.py read as the cell line it came from.

A worker (or a test process) runs the rendered file, so its tracebacks name ``/tmp/.../handler_model.py`` and that
file's line numbers; the renderer put each block of user code under a marker line, and each block knows its cell's
line of every line (``SourceBlock.lines``). ``in_cells`` rewrites such frames as IPython names a cell's frames:
``cell In[5], line 9, in preprocess``. The handler cell's lines count its ``%%ms_handler`` line as line 1, as the
notebook shows them (capture numbered them so: ``body_line``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

from msnb.errors import MsnbError
from msnb.package.render import BLOCK_MARKER, render_handler
from msnb.spec import HandlerSpec
from msnb.templates.msnb_runtime.handler.names import HANDLER_MODULE

_MAPS: dict[str, dict[int, tuple[str, int]]] = {}  # spec digest -> its line map (the same spec fails often)
_FRAME = re.compile(rf'File "[^"]*{HANDLER_MODULE}\.py", line (\d+)')


def in_cells(text: str | None, spec: HandlerSpec | None) -> str | None:
    """``text`` with every frame in ``spec``'s rendered handler_model.py named by its cell and the cell's line."""
    if not text or spec is None or f"{HANDLER_MODULE}.py" not in text:
        return text
    lines = line_map(spec)

    def cell(found: re.Match) -> str:
        where = lines.get(int(found.group(1)))
        return f"{where[0]}, line {where[1]}" if where else found.group(0)

    return _FRAME.sub(cell, text)


@contextlib.contextmanager
def pointing_at_cells(spec: HandlerSpec | None) -> Iterator[None]:
    """An MsnbError raised inside says its handler frames as cell lines (its message and details)."""
    try:
        yield
    except MsnbError as err:
        if spec is not None:
            err.message, err.details = in_cells(err.message, spec), _said_once(err.message, in_cells(err.details, spec))
            err.args = (err.render(),)
        raise


def _said_once(message: str, details: str | None) -> str | None:
    """``details`` without a traceback's last line (the exception) when the message says it already."""
    lines = (details or "").rstrip().splitlines()
    if lines and lines[-1].strip() and lines[-1].strip() in message and len(lines) > 1:
        return "\n".join(lines[:-1])
    return details


def chunks_pointing_at_cells(chunks: Iterable[Any], spec: HandlerSpec | None) -> Iterator[Any]:
    """``chunks`` (a streamed answer) whose error, raised while they arrive, names cell lines."""
    with pointing_at_cells(spec):
        yield from chunks


def line_map(spec: HandlerSpec) -> dict[int, tuple[str, int]]:
    """Rendered line number -> (the cell it came from, that cell's line), for the lines of cells only."""
    digest = spec.digest()
    if digest not in _MAPS:
        if len(_MAPS) > 16:
            _MAPS.clear()
        _MAPS[digest] = _line_map(spec)
    return _MAPS[digest]


def _line_map(spec: HandlerSpec) -> dict[int, tuple[str, int]]:
    rendered = render_handler(spec).splitlines()
    found: dict[int, tuple[str, int]] = {}
    at = 0
    for block in spec.blocks:
        marker = f"{BLOCK_MARKER}{block.origin}"
        at = next((i for i in range(at, len(rendered)) if rendered[i].startswith(marker)), len(rendered))
        if at == len(rendered):
            break
        if block.origin.cell is not None or block.origin == "handler cell":
            for line in range(1, block.source.rstrip().count("\n") + 2):
                if not block.lines or (line <= len(block.lines) and block.lines[line - 1]):
                    found[at + 1 + line] = (str(block.origin), block.cell_line(line))
        at += 1
    return found
