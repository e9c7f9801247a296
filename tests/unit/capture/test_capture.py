"""Capture: a handler cell and the notebook's other cells become a HandlerSpec."""

from __future__ import annotations

import textwrap

import pytest

from msnb.capture.cells import RUNTIME_HINT, capture
from msnb.errors import CaptureError, SpecError

INIT = "def init_function():\n    return Net()\n"


def cells(*sources: str) -> list[tuple[str, str]]:
    """A pool of cells labelled ``cell 1``, ``cell 2``, ... in order."""
    return [(f"cell {i}", textwrap.dedent(src)) for i, src in enumerate(sources, 1)]


def run(cell: str, pool=(), **config):
    return capture("m", textwrap.dedent(cell), list(pool), **config)


def pulled(spec) -> dict[str, tuple[str, ...]]:
    return {b.origin: b.names for b in spec.pulled_in}


def loaded(spec) -> dict:
    namespace: dict = {}
    exec(compile(spec.source, "<handler>", "exec"), namespace)
    return namespace


# ---------------------------------------------------------------- the handler cell itself
def test_syntax_error_names_the_line():
    with pytest.raises(CaptureError, match="line 3") as err:
        run("import torch\ndef init_function():\n    return (\n")
    assert err.value.hint and "line 3" in err.value.hint


def test_missing_init_function_names_the_signature():
    with pytest.raises(SpecError, match="init_function") as err:
        run("def preprocess(sample):\n    return sample\n")
    assert "def init_function(**kwargs)" in err.value.hint


@pytest.mark.parametrize(
    "cell, role, signature",
    [
        ("def init_function(path, /):\n    return 1\n", "init_function", "def init_function(**kwargs)"),
        (
            "def init_function():\n    return 1\ndef preprocess(a, b):\n    return a\n",
            "preprocess",
            "def preprocess(sample)",
        ),
        (
            "def init_function():\n    return 1\ndef postprocess():\n    return 1\n",
            "postprocess",
            "def postprocess(output)",
        ),
        (
            "def init_function():\n    return 1\ndef install_packages(x):\n    pass\n",
            "install_packages",
            "def install_packages()",
        ),
    ],
)
def test_wrong_arity_names_role_and_signature(cell, role, signature):
    with pytest.raises(CaptureError, match=f"role {role}") as err:
        run(cell)
    assert signature in err.value.hint


def test_aliases_preprocess_function_and_postprocess_function():
    spec = run("""
        def init_function():
            return 1
        def preprocess_function(sample):
            return sample
        def postprocess_function(output):
            return output
    """)
    assert spec.roles == {
        "init_function": "init_function",
        "preprocess": "preprocess_function",
        "postprocess": "postprocess_function",
    }


def test_only_imports_and_definitions_are_kept_with_a_warning():
    spec = run("""
        import torch
        LABELS = ["cat", "dog"]
        print("trying it out")
        def init_function():
            return torch.nn.Linear(2, len(LABELS))
        init_function()
    """)
    source = spec.blocks[-1].source
    assert "import torch" in source and 'LABELS = ["cat", "dog"]' in source
    assert "print(" not in source and "\ninit_function()" not in source
    assert any(w.startswith('line 4: `print("trying it out")` is not kept') for w in spec.warnings)
    assert any(w.startswith("line 7: `init_function()`") for w in spec.warnings)
    assert spec.blocks[-1].names == ("torch", "LABELS", "init_function")


def test_decorators_and_source_are_kept_verbatim():
    cell = "import functools\n\n@functools.lru_cache(maxsize=None)  # cached\ndef init_function(h=3):\n    return   h\n"
    spec = run(cell)
    assert "@functools.lru_cache(maxsize=None)  # cached\ndef init_function(h=3):\n    return   h" in spec.source


def test_names_the_cell_binds_later_or_by_global_are_its_own():
    spec = run(
        """
        def init_function():
            global model
            model = helper()
            return model
        def preprocess(sample):
            return model(sample)
        def helper():
            return 1
    """,
        cells("def helper():\n    raise RuntimeError\n"),
    )
    assert spec.pulled_in == ()


def test_name_bound_only_by_a_dropped_statement_in_the_cell_is_refused():
    with pytest.raises(CaptureError, match="`tok`.*line 1 of the handler cell") as err:
        run("tok = Tokenizer()\ndef init_function():\n    return tok\n")
    assert "--checkpoint" in err.value.hint


# ---------------------------------------------------------------- dependency closure
def test_class_two_cells_up_is_pulled_in():
    pool = cells("import torch\n", "class Net(torch.nn.Module):\n    pass\n", "x = 1 + 1\n")
    spec = run(INIT, pool)
    assert pulled(spec) == {"cell 1": ("torch",), "cell 2": ("Net",)}
    assert spec.source.index("import torch") < spec.source.index("class Net") < spec.source.index("def init_function")
    assert "x = 1 + 1" not in spec.source


def test_transitive_chain_in_source_order():
    pool = cells(
        "class C:\n    pass\n", "class B(C):\n    pass\n", "def unrelated():\n    pass\n", "class A(B):\n    pass\n"
    )
    spec = run("def init_function():\n    return A()\n", pool)
    assert pulled(spec) == {"cell 1": ("C",), "cell 2": ("B",), "cell 4": ("A",)}
    namespace = loaded(spec)
    assert isinstance(namespace["init_function"](), namespace["C"])


def test_latest_definition_wins():
    pool = cells("def helper():\n    return 'old'\n", "def helper():\n    return 'new'\n")
    spec = run("def init_function():\n    return helper()\n", pool)
    assert pulled(spec) == {"cell 2": ("helper",)}
    assert loaded(spec)["init_function"]() == "new"


def test_training_loop_is_never_included():
    pool = cells("""
        import torch
        class Net(torch.nn.Module):
            pass
        model = Net()
        for epoch in range(10):
            loss = model(torch.zeros(1))
        torch.save(model.state_dict(), "net.pt")
    """)
    spec = run(INIT, pool)
    assert "for epoch" not in spec.source and "torch.save" not in spec.source and "model = Net()" not in spec.source


@pytest.mark.parametrize(
    "binding, name",
    [
        ("weights = torch.load('w.pt')", "weights"),
        ("tok = Tokenizer()", "tok"),
        ("f = make_fn()", "f"),
        ("for x in range(3):\n    pass", "x"),
        ("with open('f') as fh:\n    pass", "fh"),
        ("n = lambda: 1", "n"),
    ],
)
def test_runtime_bound_name_is_refused_with_the_hint(binding, name):
    pool = cells("import torch\n", binding + "\n")
    with pytest.raises(CaptureError, match=f"`{name}`.*cell 2") as err:
        run(f"def init_function():\n    return {name}\n", pool)
    assert err.value.hint == RUNTIME_HINT


def test_reading_a_data_file_at_module_level_is_refused_with_the_way_to_read_it():
    cell = "import json\nLABELS = json.load(open('labels.json'))\ndef init_function():\n    return LABELS\n"
    with pytest.raises(CaptureError, match="`LABELS`") as err:
        run(cell, extra_files=("labels.json",))
    assert "inside init_function" in err.value.hint and "functools.cache" in err.value.hint
    assert "working directory is the model dir" in err.value.hint


def test_init_function_parameters_without_defaults_are_accepted_when_init_kwargs_supply_them():
    cell = "def init_function(in_dim, layer_dims, *, scale):\n    return in_dim\n"
    spec = run(cell, init_kwargs={"in_dim": 5, "layer_dims": [16, 8], "scale": 2})
    assert spec.init_kwargs["layer_dims"] == [16, 8]
    with pytest.raises(SpecError, match="needs `layer_dims`, `scale` but --init-kwargs") as err:
        run(cell, init_kwargs={"in_dim": 5})
    assert '"layer_dims"' in err.value.hint
    with pytest.raises(SpecError, match="needs `layer_dims`"):  # the widget edits init_kwargs with replace()
        spec.replace(init_kwargs={"in_dim": 5, "scale": 1})


def test_runtime_rebinding_after_a_definition_is_refused():
    pool = cells("VOCAB = ['a']\n", "VOCAB = load_vocab()\n")
    with pytest.raises(CaptureError, match="`VOCAB`.*line 1 of cell 2"):
        run("def init_function():\n    return VOCAB\n", pool)


def test_undefined_name_is_refused_naming_it_and_where():
    with pytest.raises(CaptureError, match=r"`Net` \(used on line 2 of the handler cell\) is defined nowhere"):
        run(INIT, cells("import torch\n"))


def test_undefined_name_inside_a_pulled_definition_names_its_cell():
    with pytest.raises(CaptureError, match=r"`Layer` \(used on line 3 of cell 1\)"):
        run(INIT, cells("class Net:\n    def f(self):\n        return Layer()\n"))


def test_unparsable_pool_cell_is_skipped_and_mentioned_when_it_matters():
    pool = cells("class Net:\n    pass\n", "def broken(:\n")
    assert pulled(run(INIT, pool)) == {"cell 1": ("Net",)}
    with pytest.raises(CaptureError) as err:
        run("def init_function():\n    return broken()\n", pool)
    assert "cell 2" in err.value.hint


@pytest.mark.parametrize("name", ["display", "get_ipython", "Out"])
def test_ipython_names_are_refused_with_a_hint(name):
    with pytest.raises(CaptureError, match=f"`{name}`.*IPython") as err:
        run(f"def init_function():\n    {name}(1)\n    return 1\n")
    assert err.value.hint


def test_magics_and_shell_lines_in_pool_cells_are_ignored():
    pool = cells(
        "%matplotlib inline\n!pip list\nfiles = !ls\nimport torch\n%time x = 1\n",
        "%%time\nclass Net:\n    'defined under a cell magic: skipped'\n",
        "  \n%load_ext autoreload\nclass Net(torch.nn.Module):\n    pass\n",
    )
    spec = run(INIT, pool)
    assert pulled(spec) == {"cell 1": ("torch",), "cell 3": ("Net",)}
    assert "get_ipython" not in spec.source


def test_magic_lines_in_the_handler_cell_are_dropped_quoting_them():
    spec = run("%pip install numpy\nimport numpy as np\ndef init_function():\n    return np.zeros(1)\n")
    assert spec.warnings[0].startswith("line 1: `%pip install numpy` is not kept")
    assert "pip" not in spec.source


def test_imports_only_the_needed_alias():
    pool = cells("import numpy as np, os, json\nfrom collections import OrderedDict, Counter as C\n")
    spec = run("def init_function():\n    return np, C(os.sep)\n", pool)
    block = spec.pulled_in[0]
    assert block.source == "import numpy as np, os\n\nfrom collections import Counter as C"
    assert block.names == ("np", "os", "C")


def test_attribute_access_needs_only_the_base_name():
    spec = run("def init_function():\n    return torch.nn.functional.relu\n", cells("import torch.nn.functional\n"))
    assert pulled(spec) == {"cell 1": ("torch",)}


@pytest.mark.parametrize(
    "constant",
    [
        "VOCAB = ['a', 'b']",
        "VOCAB: dict = {'a': 1, 'b': (2, 3.5)}",
        "VOCAB = b'raw'",
        "VOCAB = None",
        "VOCAB = {1, 2}",
        "VOCAB = -1e-3",
    ],
)
def test_literal_constant_is_pulled_in(constant):
    spec = run("def init_function():\n    return VOCAB\n", cells(constant + "\n"))
    assert pulled(spec) == {"cell 1": ("VOCAB",)}
    assert constant in spec.source


def test_free_names_in_defaults_annotations_decorators_and_class_bodies():
    pool = cells(
        "HIDDEN = 4\n",
        "class Tensor:\n    pass\n",
        "def deco(f):\n    return f\n",
        "SIZES = (1, 2)\n",
        "def unused():\n    pass\n",
    )
    spec = run(
        """
        @deco
        def init_function(hidden=HIDDEN) -> Tensor:
            class Local:
                total = sum(SIZES)
            return [Local for _ in range(hidden)]
    """,
        pool,
    )
    assert set(pulled(spec)) == {"cell 1", "cell 2", "cell 3", "cell 4"}


def test_parameters_comprehensions_and_nested_defs_are_local():
    spec = run(
        """
        def init_function(width=2, *args, **kw):
            def inner(y):
                return [z * y for z in range(width)]
            squares = {k: k * k for k in args}
            return lambda q: inner(q) + list(squares) + list(kw)
    """,
        cells("width = 1\nz = 2\nk = 3\nq = 4\ny = 5\ninner = 6\n"),
    )
    assert spec.pulled_in == ()


def test_pulled_class_needing_a_name_only_the_handler_imports_is_refused():
    pool = cells("class Net(nn.Module):\n    pass\n")
    with pytest.raises(CaptureError, match="`Net`.*needs `nn`") as err:
        run("from torch import nn\n" + INIT, pool)
    assert "cell 1" in err.value.hint


def test_handler_import_also_in_an_earlier_cell_is_pulled_for_definitions_that_need_it():
    spec = run("from torch import nn\n" + INIT, cells("from torch import nn\n", "class Net(nn.Module):\n    pass\n"))
    assert pulled(spec) == {"cell 1": ("nn",), "cell 2": ("Net",)}
    assert loaded(spec)["init_function"]()


def test_definition_time_names_come_from_before_the_definition_as_in_the_notebook():
    pool = cells(
        "import torch\nclass Base:\n    v = 1\n",
        "class Net(Base):\n    pass\n",
        "import torch\nclass Base:\n    v = 2\n",
    )
    spec = run("def init_function():\n    return Net(), Base\n", pool)
    assert pulled(spec) == {"cell 1": ("Base",), "cell 2": ("Net",), "cell 3": ("Base",)}
    net, base = loaded(spec)["init_function"]()
    assert net.v == 1 and base.v == 2


def test_a_module_imported_again_later_does_not_break_definition_order():
    pool = cells("import torch\n", "class Net(torch.nn.Module):\n    pass\n", "import torch\nprint(torch)\n")
    spec = run(INIT, pool)
    assert pulled(spec) == {"cell 1": ("torch",), "cell 2": ("Net",)}


def test_definition_needing_a_name_defined_only_later_is_refused():
    pool = cells("@register\nclass Net:\n    pass\n", "def register(c):\n    return c\n")
    with pytest.raises(CaptureError, match="`Net`.*needs `register`.*cell 2"):
        run(INIT, pool)


def test_star_import_is_kept_with_a_warning():
    spec = run(INIT, cells("from torch.nn import *\n"))
    assert "from torch.nn import *" in spec.source
    assert any("star import" in w and "`Net`" in w for w in spec.warnings)


def test_builtins_are_not_pulled_and_config_passes_through():
    spec = run(
        "def init_function(n=3):\n    return list(range(len(str(n))))\n",
        version="2.0",
        batch_size=4,
        init_kwargs={"n": 5},
        cell_origin="cell In[7]",
    )
    assert spec.pulled_in == () and spec.version == "2.0" and spec.batch_size == 4
    assert spec.origin == "cell In[7]" and spec.blocks[-1].origin == "cell In[7]"


def test_rendered_module_compiles_and_defines_the_roles():
    pool = cells(
        "import torch\nVOCAB = {'a': 0}\n",
        "class Net(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.emb = torch.nn.Embedding(len(VOCAB), 2)\n",
    )
    spec = run(
        """
        def init_function():
            return Net()
        def preprocess(sample):
            return torch.tensor([VOCAB[t] for t in sample])
    """,
        pool,
    )
    compile(spec.source, "<handler>", "exec")
    namespace = loaded(spec)
    assert namespace["init_function"]().emb.num_embeddings == 1
    assert namespace["preprocess"](["a"]).tolist() == [0]


# ------------------------------------------------------------------ one line-number convention
def test_every_capture_message_counts_the_handler_cells_lines_from_its_ms_handler_line(tmp_path):
    from msnb.capture.local_code import search_path
    from msnb.spec import Origin

    cell = "import torch\nimport nosuchmod_xyz\n\ndef init_function():\n    return torch.nn.Linear(4, 2)\n"
    cell += "\nprint('hi')\n\ndef postprocesss(out):\n    return out\n"
    where = {"cell_origin": Origin("cell In[2]", cell=2), "body_line": 2, "search_path": search_path(tmp_path)}
    spec = capture("m", cell, [], **where)
    said = "\n".join(spec.warnings)  # the cell as the notebook numbers it: line 1 is `%%ms_handler m`
    assert "`import nosuchmod_xyz` (line 3 of cell In[2])" in said
    assert "line 8: `print('hi')` is not kept" in said and spec.near_misses[0].line == 10
    assert spec.where(1) == "line 2 of cell In[2]" and spec.where(3) == "line 3 of cell In[2]"
