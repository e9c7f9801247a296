"""Two model folders in one process, each in its own namespace (the runtime's ray.isolation): folders that ship a
``model.py``, a ``handler.py`` and a package of the same names each see their own, imported at top level, inside a
function at request time, by importlib and through a pickle, with their own cwd and variables; no Ray."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from msnb.templates.msnb_runtime.ray.isolation import Namespace, resident

HANDLER = textwrap.dedent("""
    import os
    import pickle

    import model
    from utilities.scale import factor


    def handle(data, context=None):
        import model as late  # imported at request time, as some TorchServe handlers do
        from utilities import scale

        return {
            "top": model.VALUE,
            "late": late.VALUE,
            "factor": factor * scale.factor,
            "pickled": pickle.loads(pickle.dumps(model.Thing())).value,
            "file": open("label.txt").read(),
            "env": os.environ.get("WHICH"),
        }
""")


def folder(root: Path, which: int) -> Path:
    """A model folder that ships model.py, handler.py and a package ``utilities`` of its own (a name no module of the test process has)."""
    path = root / f"m{which}"
    (path / "utilities").mkdir(parents=True)
    (path / "model.py").write_text(f"VALUE = {which}\n\nclass Thing:\n    value = {which * 10}\n")
    (path / "handler.py").write_text(HANDLER)
    (path / "utilities" / "__init__.py").write_text("")
    (path / "utilities" / "scale.py").write_text(f"factor = {which + 1}\n")
    (path / "label.txt").write_text(f"label {which}")
    return path


def load(space: Namespace):
    with space.entered():
        return importlib.import_module("handler").handle


@pytest.fixture
def two(tmp_path):
    spaces = [Namespace(folder(tmp_path, n), env={"WHICH": f"w{n}"}) for n in (1, 2)]
    before = (set(sys.modules), list(sys.path), os.getcwd())
    yield spaces
    for space in spaces:
        space.close()
    assert (set(sys.modules), list(sys.path), os.getcwd()) == before  # nothing of either is left


def expected(n: int) -> dict:
    return {"top": n, "late": n, "factor": (n + 1) ** 2, "pickled": n * 10, "file": f"label {n}", "env": f"w{n}"}


def test_two_folders_with_the_same_module_names_each_answer_with_their_own(two):
    first, second = two
    handles = [first.wrap(load(first)), second.wrap(load(second))]  # the second loads after the first left
    for _ in range(3):  # in turn: each call swaps the other out
        assert [h(None) for h in handles] == [expected(1), expected(2)]
    assert resident() is second and sys.modules["model"].VALUE == 2
    assert "WHICH" not in os.environ or os.environ["WHICH"] == "w2"


def test_a_model_swapped_out_leaves_no_module_or_path_of_its_own_behind(two, tmp_path):
    first, second = two
    handle = first.wrap(load(first))
    load(second)  # the first is swapped out: the second's modules, path and cwd in
    assert sys.modules["model"].__file__ == str(tmp_path / "m2" / "model.py")
    assert str(tmp_path / "m1") not in sys.path and os.getcwd() == str(tmp_path / "m2")
    assert handle(None) == expected(1)
    assert sys.modules["utilities.scale"].factor == 2 and os.getcwd() == str(tmp_path / "m1")


def test_a_module_imported_late_becomes_the_models_own(two, tmp_path):
    first, second = two
    (tmp_path / "m1" / "extra.py").write_text("NAME = 'one'\n")
    (tmp_path / "m2" / "extra.py").write_text("NAME = 'two'\n")
    late = "def handle(data, context=None):\n    import extra\n    return extra.NAME\n"
    for n in (1, 2):
        (tmp_path / f"m{n}" / "handler.py").write_text(late)
    handles = [first.wrap(load(first)), second.wrap(load(second))]
    assert [h(None) for h in handles] == ["one", "two"]
    assert [h(None) for h in handles] == ["one", "two"]  # each its own copy, kept while the other runs


def test_a_load_that_fails_fails_alone(two, tmp_path):
    first, second = two
    (tmp_path / "m2" / "handler.py").write_text("import model\nraise RuntimeError('weights do not match')\n")
    handle = first.wrap(load(first))
    with pytest.raises(RuntimeError, match="weights do not match"):
        load(second)
    second.close()
    assert handle(None) == expected(1)


def test_calls_of_two_models_from_many_threads_never_see_each_other(two):
    first, second = two
    handles = {1: first.wrap(load(first)), 2: second.wrap(load(second))}
    wrong: list = []

    def hammer(n: int) -> None:
        for _ in range(200):
            if handles[n](None) != expected(n):
                wrong.append(n)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in (1, 2, 1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
