"""Property: capture pulls in exactly the transitive set of definitions the handler cell references."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from msnb.capture.cells import capture

KINDS = ("def", "class", "const", "import")
NOISE = (
    "noise_{k} = compute({k})",
    "for noise_{k} in range(3):\n    total = noise_{k}",
    "print('cell {k}')",
    "%matplotlib inline",
    "!echo {k}",
    "model = train(epochs={k})",
)


def definition(i: int, kind: str, refs: list[int], classes: set[int], eager: bool) -> str:
    """Source of definition ``d{i}`` of ``kind`` referencing ``d{j}`` for each j in refs (all j < i)."""
    names = "".join(f"d{j}, " for j in refs)
    if kind == "def":
        default = f"=d{refs[0]}" if eager and refs else "=None"
        return f"def d{i}(x{default}):\n    return ({names})\n"
    if kind == "class":
        bases = [f"d{j}" for j in refs if j in classes][:1] if eager else []
        return f"class d{i}({', '.join(bases)}):\n    def f(self):\n        return ({names})\n"
    if kind == "const":
        return f"d{i} = ({i}, 'v{i}', [None, b'x'])\n"
    return f"from math import pi as d{i}\n"


@st.composite
def notebooks(draw):
    n = draw(st.integers(1, 8))
    kinds = [draw(st.sampled_from(KINDS)) for _ in range(n)]
    refs = {
        i: sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i and kinds[i] in ("def", "class") else []
        for i in range(n)
    }
    classes = {i for i in range(n) if kinds[i] == "class"}
    sources = [definition(i, kinds[i], refs[i], classes, draw(st.booleans())) for i in range(n)]
    # A stale earlier version of some definitions (the latest wins) and runtime noise in the first cell.
    stale = [
        f"def d{i}():\n    return d{j}\n"
        for i in draw(st.sets(st.integers(0, n - 1), max_size=3))
        for j in range(n)
        if j != i
    ][:3]
    noise = [draw(st.sampled_from(NOISE)).format(k=k) + "\n" for k in range(draw(st.integers(0, 3)))]
    cuts = sorted(draw(st.sets(st.integers(1, n), max_size=n)) | {n})
    cells, start = ["".join(stale + noise)], 0
    for cut in cuts:
        cells.append("\n".join(sources[start:cut]))
        start = cut
    used = sorted(draw(st.sets(st.integers(0, n - 1), max_size=4)))
    body = "".join(f"d{j}, " for j in used)
    handler = f"def init_function(scale=1):\n    return ({body})\n"
    pool = [(f"cell {k}", src) for k, src in enumerate(cells)]
    return pool, handler, refs, used


def transitive(used: list[int], refs: dict[int, list[int]]) -> set[str]:
    seen, todo = set(), list(used)
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo += refs[j]
    return {f"d{j}" for j in seen}


def top_level_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets}
    return names


@settings(max_examples=200, deadline=None)
@given(notebooks())
def test_closure_is_exactly_the_referenced_definitions(notebook):
    pool, handler, refs, used = notebook
    spec = capture("prop", handler, pool)
    expected = transitive(used, refs)
    assert {n for b in spec.pulled_in for n in b.names} == expected
    assert top_level_names("\n\n".join(b.source for b in spec.pulled_in)) == expected
    assert all(b.origin != "cell 0" for b in spec.pulled_in)  # stale versions and noise never travel
    namespace: dict = {}
    exec(compile(spec.source, "<prop>", "exec"), namespace)
    assert callable(namespace["init_function"]) and len(namespace["init_function"]()) == len(used)
