"""Runtime values: what capture snapshots, what it refuses, which literals count as changed, and typo warnings."""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from msnb.capture.cells import RUNTIME_HINT, capture
from msnb.capture.kernel_values import load, snapshot, unsupported
from msnb.capture.mutations import mutated
from msnb.errors import CaptureError
from msnb.package.render import render_handler
from msnb.trial import runner

HANDLER = """\
import torch

def init_function():
    return torch.nn.Identity()

def preprocess(sample):
    return torch.tensor([float(vocab.get(w, 0)) for w in sample.split()])

def postprocess(output):
    return {"ids": output.tolist(), "labels": labels}
"""


def cells(*sources: str) -> list[tuple[str, str]]:
    return [(f"cell {i}", textwrap.dedent(src)) for i, src in enumerate(sources, 1)]


def run(cell: str, pool=(), **config):
    return capture("m", textwrap.dedent(cell), list(pool), **config)


# ---------------------------------------------------------------- which literals count as changed
@pytest.mark.parametrize(
    "source, line",
    [
        ("for w in words:\n    vocab[w] = len(vocab)\n", 2),
        ("vocab.update({'a': 1})\n", 1),
        ("if True:\n    vocab.setdefault('a', 1)\n", 2),
        ("vocab['a']['b'] += 1\n", 1),
        ("del vocab['a']\n", 1),
        ("vocab.cfg = 1\n", 1),
        ("[vocab.append(w) for w in words]\n", 1),
        ("for vocab[0] in range(3):\n    pass\n", 1),
        ("if True:\n    vocab += ['x']\n", 2),
    ],
)
def test_in_place_changes_are_found_in_loops_branches_and_comprehensions(source, line):
    assert mutated(ast.parse(source).body[0]) == {"vocab": line}


@pytest.mark.parametrize(
    "source",
    ["def add(w):\n    vocab[w] = 1\n", "f = lambda: vocab.append(1)\n", "n = len(vocab)\n", "vocab = {}\n"],
)
def test_code_that_only_runs_later_or_only_reads_changes_nothing(source):
    assert mutated(ast.parse(source).body[0]) == {}


def test_a_literal_changed_in_a_later_cell_is_refused_without_a_kernel_naming_both_places():
    pool = cells("vocab = {'<unk>': 0}\nlabels = ['neg']\n", "for w in 'a b'.split():\n    vocab[w] = len(vocab)\n")
    with pytest.raises(CaptureError) as err:
        run(HANDLER, [*pool, ("cell 3", "labels.append('pos')\n")])
    message = err.value.message
    assert "`vocab` (used on line 7 of the handler cell) is bound by a literal on line 1 of cell 1" in message
    assert "changed on line 2 of cell 2" in message and "`labels`" in message and "line 1 of cell 3" in message
    assert err.value.hint == RUNTIME_HINT and "msnb export --execute" in err.value.hint


def test_a_literal_changed_only_before_it_is_bound_again_is_still_a_constant():
    pool = cells("vocab = {}\nvocab['x'] = 1\n", "vocab = {'a': 1}\nlabels = ['neg']\n")
    spec = run(HANDLER, pool)
    assert spec.values is None and "vocab = {'a': 1}" in spec.source


# ---------------------------------------------------------------- snapshots in a kernel
def test_values_are_snapshotted_from_the_namespace_and_bound_before_the_users_code():
    pool = cells("vocab = {'<unk>': 0}\nfor w in 'a b'.split():\n    vocab[w] = len(vocab)\nlabels = ['neg', 'pos']\n")
    namespace = {"vocab": {"<unk>": 0, "a": 1, "b": 2}, "labels": ["neg", "pos"]}
    spec = run(HANDLER, pool, namespace=namespace)
    assert spec.values.names == ("vocab",) and "vocab = {'<unk>': 0}" not in spec.source
    assert "labels = ['neg', 'pos']" in spec.source  # a literal never changed stays code
    namespace["vocab"]["c"] = 3  # changed after capture: the snapshot is a copy
    assert load(spec.values.data) == {"vocab": {"<unk>": 0, "a": 1, "b": 2}}
    assert spec.values.changed(namespace) == ["vocab"]
    text = render_handler(spec)
    assert text.index("_msnb_load_values(__file__") < text.index("def init_function")
    assert runner.predict_in_process(spec, ["a b c"]) == [{"ids": [1.0, 2.0, 0.0], "labels": ["neg", "pos"]}]


def test_the_digest_covers_the_values():
    namespace = {"vocab": {"a": 1}, "labels": ["neg"]}
    pool = cells("vocab = {}\nvocab['a'] = 1\nlabels = []\nlabels += ['neg']\n")
    first = run(HANDLER, pool, namespace=namespace)
    namespace["labels"] = ["pos"]
    assert run(HANDLER, pool, namespace=namespace).digest() != first.digest()


def test_nested_values_keep_their_types_element_by_element():
    config = {"model": {"layers": {"sizes": (4, 2), "act": "relu"}}, 1: None, (1, 2): [True, 2.5]}
    tensors = {"mean": torch.arange(6.0).view(2, 3)[1], "ids": torch.tensor([1, 2], dtype=torch.int64)}
    values = snapshot({"cfg": "", "t": "", "names": ""}, {"cfg": config, "t": tensors, "names": ["a", "b"]})
    back = load(values.data)
    assert back["cfg"] == config and type(back["cfg"]["model"]["layers"]["sizes"]) is tuple
    assert back["names"] == ["a", "b"]
    for key, tensor in tensors.items():
        assert torch.equal(back["t"][key], tensor) and back["t"][key].dtype == tensor.dtype
    assert back["t"]["mean"].untyped_storage().nbytes() == 12  # a view travels alone, not its whole storage
    assert [i.kind for i in values.items] == ["dict (3 items)", "dict (2 items)", "list (2 items)"]


class Estimator:  # an sklearn-like object
    def predict(self, x):
        return x


def test_values_that_cannot_travel_are_refused_together_naming_their_types(tmp_path):
    handle = open(tmp_path / "f.txt", "w")  # the open handle is the point
    namespace = {"est": Estimator(), "fn": lambda x: x, "gen": (i for i in range(3)), "fh": handle}
    uses = "def init_function():\n    return torch.nn.Identity()\n\ndef preprocess(s):\n    return est, fn, gen, fh\n"
    pool = cells("import torch\nest = make()\nfn = lambda x: x\ngen = (i for i in range(3))\nfh = open('f.txt')\n")
    with pytest.raises(CaptureError) as err:
        run(uses, pool, namespace=namespace)
    handle.close()
    message = err.value.message
    assert "test_values.Estimator" in message and "a function" in message
    assert "a generator" in message and "_io.TextIOWrapper" in message
    assert "plain data" in err.value.hint and "--extra-files" in err.value.hint


def test_a_module_bound_at_runtime_keeps_the_checkpoint_hint():
    pool = cells("import torch\nnet = torch.nn.Linear(2, 2)\n")
    with pytest.raises(CaptureError, match=r"`net`.*nn.Module \(Linear\)") as err:
        run("def init_function():\n    return net\n", pool, namespace={"net": torch.nn.Linear(2, 2)})
    assert "--checkpoint" in err.value.hint


def test_a_value_over_the_limit_is_refused_with_the_limit_and_the_option():
    big = torch.empty(50 * 2**20)  # 200 MB, never copied
    pool = cells("import torch\nbig = torch.empty(50 * 2**20)\n")
    cell = "def init_function():\n    return torch.nn.Identity()\n\ndef preprocess(s):\n    return big[:2]\n"
    with pytest.raises(CaptureError, match=r"`big`.*200.0 MB, over the 64 MB limit") as err:
        run(cell, pool, namespace={"big": big})
    assert "--max-value-mb" in err.value.hint
    small = run(cell, pool, namespace={"big": torch.ones(4)}, max_value_mb=1)
    assert small.values.names == ("big",)


@pytest.mark.parametrize(
    "value, says",
    [({1, 2}, "a set"), ({"a": {1}}, "holds ['a'], a set"), ({object(): 1}, "has a key"), ([1, b"x", None], None)],
)
def test_what_weights_only_reads_back_is_what_travels(value, says):
    problem = unsupported(value)
    assert problem is None if says is None else says in problem


# ---------------------------------------------------------------- likely typos
@pytest.mark.parametrize("typo, role", [("postprocesss", "postprocess"), ("pre_process", "preprocess")])
def test_a_function_named_like_a_missing_role_warns(typo, role):
    cell = f"import torch\ndef init_function():\n    return torch.nn.Identity()\n\ndef {typo}(x):\n    return x\n"
    spec = run(cell)
    (miss,) = spec.near_misses
    assert (miss.name, miss.role, miss.line) == (typo, role, 5)
    assert f"did you mean `{role}`?" in miss.warning() and not [w for w in spec.warnings if typo in w]  # said once


def test_init_fn_instead_of_init_function_is_named_in_the_error():
    with pytest.raises(CaptureError, match="Did you mean `init_function` for `init_fn` \\(line 2\\)"):
        run("import torch\ndef init_fn():\n    return torch.nn.Identity()\n")


def test_helpers_that_are_called_or_far_from_a_role_do_not_warn():
    cell = (
        "import torch\ndef preprocessing(s):\n    return s\n\ndef init_function():\n    return torch.nn.Identity()\n\n"
        "def preprocess(s):\n    return preprocessing(s)\n\ndef tokenize(s):\n    return s\n"
    )
    assert run(cell).near_misses == ()


def test_a_literal_in_the_handler_cell_changed_below_it_travels_as_the_kernels_value():
    cell = HANDLER.replace("import torch\n", "import torch\nlabels = ['neg']\nlabels += ['pos']\nvocab = {}\n", 1)
    spec = run(cell, namespace={"labels": ["neg", "pos"]})
    assert spec.values.names == ("labels",) and "labels = ['neg']" not in spec.source
    assert "vocab = {}" in spec.source and not any("labels" in w for w in spec.warnings)


def test_an_own_handler_function_sees_the_kernels_value_too():
    cell = textwrap.dedent(
        """
        import torch

        def handle(data, context):
            if data is None:
                return None
            return [{"label": labels[int(row["body"]["i"])], "scale": scale.tolist()} for row in data]
        """
    )
    pool = cells("import torch\nlabels = []\nlabels.extend(['cat', 'dog'])\nscale = torch.ones(2) * 3\n")
    spec = run(cell, pool, namespace={"labels": ["cat", "dog"], "scale": torch.ones(2) * 3})
    assert spec.form == "function" and spec.values.names == ("labels", "scale")
    assert runner.predict_in_process(spec, [{"i": 1}]) == [{"label": "dog", "scale": [3.0, 3.0]}]
