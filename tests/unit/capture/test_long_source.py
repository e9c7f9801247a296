"""A cell holding a very long line captures in one pass over its text, and slices it exactly."""

from __future__ import annotations

import ast

import pytest

from msnb.capture.cells import capture
from msnb.capture.scope import segment
from msnb.package.render import render_handler


@pytest.mark.timeout(120)  # one pass takes about a second; re-splitting per statement took minutes
def test_a_5_mb_literal_used_by_the_handler_is_captured_and_rendered_whole():
    literal = "é" * 2_500_000  # 5 MB of UTF-8: byte offsets differ from character offsets
    cell = (
        f"import torch\nDATA = {literal!r}\n\ndef init_function():\n    return torch.nn.Linear(len(DATA) % 3 + 1, 1)\n"
    )
    spec = capture("big", cell, [("cell 1", f"OTHER = {literal!r}\n")])
    assert f"DATA = {literal!r}" in spec.source
    module = render_handler(spec)
    compile(module, "handler_model.py", "exec")
    assert f"DATA = {literal!r}" in module


@pytest.mark.parametrize(
    "source",
    [
        "a = 'é'; b = 2\n@dec\n@dec2(1)\ndef f():\n    return 'ü'\nc = [1,\n  2]",
        "x = 1\r\ny = '\x0c\x0b\u2028'\rz = 3",  # only \n, \r\n and \r end a line for the parser
        "class K:\n    pass\n\n\nq = (1\n)  # trailing",
    ],
)
def test_segments_match_the_standard_library(source):
    tree = ast.parse(source)
    for node in tree.body:
        expected = ast.get_source_segment(source, node)
        if getattr(node, "decorator_list", None):
            lines = source.splitlines(keepends=True)
            first = min(d.lineno for d in node.decorator_list)
            expected = "".join(lines[first - 1 : node.lineno - 1]) + expected
        assert segment(source, node) == expected
