"""Which cells `msnb export --execute` runs: those the handler cells need, in notebook order, never a serving one."""

from __future__ import annotations

import nbformat

from msnb.capture.needed_cells import needed_cells

HANDLER = """\
%%ms_handler bag --checkpoint weights.pt --example '"good fun"'
import torch

def init_function():
    return torch.nn.Linear(4, 2)

def preprocess(text):
    x = torch.zeros(4)
    for w in text.split():
        x[vocab.get(w, 0)] += 1
    return x
"""


def notebook(*cells: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(c[6:]) if c.startswith("# md: ") else nbformat.v4.new_code_cell(c) for c in cells
    ]
    return nb


def test_the_values_the_handler_uses_bring_their_cells_and_serving_cells_never_run():
    nb = notebook(
        "# md: # A bag of words",
        "%load_ext msnb",
        "import torch",
        "words = 'good bad good fun'.split()",
        "raise RuntimeError('unrelated: must not run')",
        "vocab = {w: i for i, w in enumerate(sorted(set(words)))}",  # needs cell 4 in turn
        "torch.save(torch.nn.Linear(4, 2).state_dict(), 'weights.pt')",  # writes --checkpoint's file
        HANDLER,
        "server = %ms_serve bag",
        "print(server.predict('bag', 'good fun'))",
        "%ms_stop",
        "print(vocab)",  # after the handler cell: it cannot change what was captured
    )
    selection = needed_cells(nb, "demo.ipynb")
    assert selection.run == (3, 4, 6, 7, 8)
    assert selection.serving == (9, 10, 11) and selection.unneeded == (2, 5, 12)
    assert selection.summary("demo.ipynb") == (
        "ran 5 of 11 code cells of demo.ipynb: 3, 4, 6, 7, 8 (what its handler cells use); not run: 9, 10, 11 "
        "(they serve, predict or stop); 2, 5, 12 (not needed); `--execute all` runs every cell"
    )


def test_a_live_checkpoint_brings_the_cells_that_train_it_and_a_written_module_its_writefile_cell():
    nb = notebook(
        "%%writefile net.py\nimport torch\nclass Net(torch.nn.Linear):\n    pass\n",
        "import torch\nfrom net import Net",
        "model = Net(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "x = torch.rand(8, 4)",
        "for _ in range(3):\n    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step()",
        "losses = [1, 2]\nimport matplotlib",  # reads nothing the handler needs
        "%%ms_handler net --checkpoint model\nfrom net import Net\n\ndef init_function():\n    return Net(4, 2)\n",
    )
    assert needed_cells(nb, "nb.ipynb").run == (1, 2, 3, 4, 5, 7)


def test_only_the_named_handlers_needs_count_and_a_models_own_predict_is_no_serving():
    nb = notebook(
        "import torch\nfrom sklearn.linear_model import LogisticRegression",
        "clf = LogisticRegression().fit([[0], [1]], [0, 1])\nscores = clf.predict([[0.5]])",
        "table = {'a': 1}\ntable['b'] = 2",
        "%%ms_handler one\ndef init_function():\n    return torch.nn.Identity()\n\ndef postprocess(out):\n"
        "    return {'score': float(scores[0])}\n",
        "%%ms_handler two\ndef init_function():\n    return torch.nn.Identity()\n\ndef postprocess(out):\n"
        "    return table\n",
    )
    assert needed_cells(nb, "nb.ipynb", ["one"]).run == (1, 2, 4)  # clf.predict is the model's own, not a server's
    assert needed_cells(nb, "nb.ipynb", ["two"]).run == (1, 3, 5)
    assert needed_cells(nb, "nb.ipynb").run == (1, 2, 3, 4, 5)
