"""`msnb export --execute`: a notebook that trains a model and builds its vocabulary exports with its runtime values,
running only the cells its handler cells need (never a serving one); `--execute all` runs every cell."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import BODY, handler, make_notebook, run, standard

from msnb.engines.torchserve import LocalServer

DATA = """\
import json
import torch
from torch import nn

texts = ["good movie", "bad movie", "good plot", "bad acting", "great fun", "awful plot"]
targets = torch.tensor([1, 0, 1, 0, 1, 0])
vocab = {"<unk>": 0}
for text in texts:
    for word in text.split():
        vocab.setdefault(word, len(vocab))
labels = ["negative"]
"""
LABELS = 'labels.append("positive")\n'
TRAIN = """\
def bag(text):
    x = torch.zeros(len(vocab))
    for word in text.split():
        x[vocab.get(word, 0)] += 1
    return x

features = torch.stack([bag(t) for t in texts])
mean, std = features.mean(0), features.std(0) + 1e-3

class Bag(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, 2)

    def forward(self, x):
        return self.linear(x)

torch.manual_seed(0)
model = Bag(len(vocab))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for _ in range(50):
    opt.zero_grad()
    nn.functional.cross_entropy(model((features - mean) / std), targets).backward()
    opt.step()
"""
HANDLER = """\
%%ms_handler sentiment --checkpoint model --example '"good fun"'
def init_function():
    return Bag(len(vocab))

def preprocess(text):
    return (bag(text) - mean) / std

def postprocess(out):
    return {"label": labels[int(out.argmax())], "scores": out.tolist()}
"""
EXPECTED = """\
with torch.no_grad():
    answers = {t: postprocess(model(preprocess(t).unsqueeze(0))[0]) for t in ["good fun", "bad plot", "what"]}
expected = {"answers": answers, "vocab": vocab, "labels": labels}
"""
SERVING = ["server = %ms_serve sentiment", "print(server.predict('sentiment', 'good fun'))", "%ms_stop"]


def sentiment_notebook(folder: Path, *, fail: bool = False, checkpoint: bool = True) -> Path:
    handler = HANDLER if checkpoint else HANDLER.replace(" --checkpoint model", "")
    cells = ["%load_ext msnb", DATA, "labels.append(str(1 / 0))" if fail else LABELS, TRAIN, handler, *SERVING]
    return make_notebook(folder, *cells, weights=False)


def expected() -> dict:
    """The notebook's own answers, computed here by plain torch from the same cells."""
    namespace: dict = {}
    for code in (DATA, LABELS, TRAIN, HANDLER.split("\n", 1)[1], EXPECTED):
        exec(code, namespace)
    return json.loads(json.dumps(namespace["expected"]))


def test_export_execute_ships_the_vocabulary_labels_and_tensors_the_notebook_computed(tmp_path, capfd):
    nb = sentiment_notebook(tmp_path / "nb")
    code, out, err = run(capfd, "export", nb, "--execute", "--check", "-o", tmp_path / "out")  # the kernel's too
    assert code == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err  # its test processes end quietly
    assert (
        "execute: ran 4 of 8 code cells of demo.ipynb: 2, 3, 4, 5 (what its handler cells use); not run: 6, 7, 8 (they serve, predict or stop); 1 (not needed)"
        in out
    )
    expected = globals()["expected"]()
    checked = json.loads(out.split("check: sentiment answered ", 1)[1].splitlines()[0])
    assert checked["label"] == expected["answers"]["good fun"]["label"]
    assert checked["scores"] == expected["answers"]["good fun"]["scores"]
    with zipfile.ZipFile(tmp_path / "out" / "sentiment.mar") as z:
        values = torch.load(io.BytesIO(z.read("values.pt")), weights_only=True)
        source = z.read("handler_model.py").decode()
    assert values["vocab"] == expected["vocab"] and len(values["vocab"]) == 9
    assert values["labels"] == ["negative", "positive"]
    assert set(values) == {"vocab", "labels", "mean", "std"}
    assert 'vocab = {"<unk>": 0}' not in source and "load_values" in source


def test_export_without_execute_refuses_every_runtime_value_naming_cell_and_line(tmp_path, capsys):
    nb = sentiment_notebook(tmp_path / "nb", checkpoint=False)  # the file holds no weights either
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1
    assert "`vocab`" in err and "bound by a literal on line 7 of demo.ipynb, cell 2" in err
    assert "changed on line 10 of demo.ipynb, cell 2" in err
    assert "`labels`" in err and "changed on line 1 of demo.ipynb, cell 3" in err
    assert "`mean`" in err and "`std`" in err and "msnb export --execute" in err
    assert not (tmp_path / "out").exists()


def test_export_execute_of_a_notebook_whose_cell_3_raises_names_it_and_writes_nothing(tmp_path, capsys):
    nb = sentiment_notebook(tmp_path / "nb", fail=True)
    code, out, err = run(capsys, "export", nb, "--execute", "-o", tmp_path / "out")
    assert code == 1
    assert "demo.ipynb, cell 3 failed in the fresh kernel: ZeroDivisionError: division by zero" in err  # needed
    assert "Hint:" in err and not (tmp_path / "out").exists()


@pytest.mark.server
def test_the_executed_export_served_by_torchserve_answers_like_the_notebook(tmp_path, capsys):
    nb = sentiment_notebook(tmp_path / "nb")
    code, _, err = run(capsys, "export", nb, "--execute", "-o", tmp_path / "out")
    assert code == 0, err
    answers_now = expected()["answers"]
    with LocalServer(tmp_path / "server") as server:
        server.register(tmp_path / "out" / "sentiment.mar")
        answers = {text: server.predict("sentiment", text) for text in answers_now}
    for text, answer in answers.items():
        assert answer["label"] == answers_now[text]["label"]
        assert answer["scores"] == pytest.approx(answers_now[text]["scores"], abs=1e-6)


def test_export_names_a_misspelt_role_above_its_table(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("mlp", body=BODY.replace("def postprocess", "def postprocesss")))
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0 and "mlp" in out
    assert (
        "warning: mlp: line 11: `postprocesss` is not a role and nothing calls it: did you mean `postprocess`?" in err
    )


STEPS = [
    "%load_ext msnb",
    "import json\nopen('ran.log', 'a').write('2 ')\nwords = 'good bad good fun'.split()",
    "raise RuntimeError('an unrelated cell: it must not run')",
    "open('ran.log', 'a').write('4 ')\nvocab = {w: i for i, w in enumerate(sorted(set(words)))}",  # needs cell 2
    "%%ms_handler bag --example '\"good fun\"'\nimport torch\n\ndef init_function():\n    torch.manual_seed(0)\n"
    "    return torch.nn.Linear(3, 2)\n\ndef preprocess(text):\n    x = torch.zeros(3)\n    for w in text.split():\n"
    "        x[vocab[w]] += 1\n    return x\n",
    "%ms_predict bag --data '\"good\"'",  # fails if run: nothing serves bag in that kernel
    "%ms_serve no_such_handler",  # fails if run: no such handler
    "%ms_stop",
]


def test_execute_runs_the_two_cells_the_value_needs_in_order_and_never_a_serving_cell(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", *STEPS, weights=False)
    code, out, err = run(capsys, "export", nb, "--execute", "--check", "-o", tmp_path / "out")
    assert code == 0, err
    assert (nb.parent / "ran.log").read_text() == "2 4 "  # both, in notebook order
    assert (
        "execute: ran 3 of 8 code cells of demo.ipynb: 2, 4, 5 (what its handler cells use); not run: 6, 7, 8 "
        "(they serve, predict or stop); 1, 3 (not needed); `--execute all` runs every cell" in out
    )
    with zipfile.ZipFile(tmp_path / "out" / "bag.mar") as z:
        values = torch.load(io.BytesIO(z.read("values.pt")), weights_only=True)
    assert values["vocab"] == {"bad": 0, "fun": 1, "good": 2}
    torch.manual_seed(0)
    plain = torch.nn.Linear(3, 2)(torch.tensor([0.0, 1.0, 1.0]))  # "good fun" as the notebook computes it
    assert json.loads(out.split("check: bag answered ", 1)[1].splitlines()[0]) == pytest.approx(plain.tolist())
    code, _, err = run(capsys, "export", nb, "--execute", "all", "-o", tmp_path / "all")
    assert code == 1 and "demo.ipynb, cell 3 failed in the fresh kernel: RuntimeError" in err  # all: every cell


def test_execute_takes_no_value_but_all(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", *STEPS, weights=False)
    code, _, err = run(capsys, "export", "--execute", str(nb))
    assert code == 2 and "takes no value but `all`" in err and "Hint: put the notebook first" in err


def test_the_refusal_without_execute_is_one_line_per_value_and_one_hint(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", *STEPS, weights=False)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    lines = err.strip().splitlines()
    assert (
        code == 1
        and lines[0]
        == "error: bag: The handler uses a value the kernel computes; the notebook file holds only the code:"
    )
    assert lines[1] == (  # vocab's comprehension travels as code: the value under it is what the kernel computed
        "  `words` (used on line 2 of demo.ipynb, cell 4) is bound at runtime by line 3 of demo.ipynb, cell 2"
    )
    assert lines[2].startswith("Hint: run `msnb export --execute`") and len(lines) == 3
