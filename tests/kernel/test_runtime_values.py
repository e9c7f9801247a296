"""Runtime values in a real IPython shell: built by loops and appends, snapshotted, served, and stale when changed."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import run_cell as run
from helpers import run_magic as magic
from IPython.utils.capture import capture_output

pytestmark = pytest.mark.kernel

DATA = textwrap.dedent(
    """
    import torch
    rv_texts = ["good movie", "bad movie", "good plot"]
    rv_vocab = {"<unk>": 0}
    for text in rv_texts:
        for word in text.split():
            rv_vocab.setdefault(word, len(rv_vocab))
    rv_labels = ["negative"]
    rv_features = torch.rand(5, 4)
    rv_mean, rv_std = rv_features.mean(0), rv_features.std(0)
    """
)
HANDLER = textwrap.dedent(
    """
    import torch

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 2)

    def preprocess(text):
        ids = [rv_vocab.get(w, 0) for w in text.split()]
        x = torch.zeros(4)
        x[: len(ids)] = torch.tensor(ids, dtype=torch.float32)
        return (x - rv_mean) / rv_std

    def postprocess(out):
        return {"label": rv_labels[int(out.argmax())], "scores": out.tolist()}
    """
)
EXPECTED = textwrap.dedent(
    """
    torch.manual_seed(0)
    rv_model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        rv_expected = [postprocess(rv_model(preprocess(t))) for t in ["good plot", "bad movie zzz"]]  # one at a time
        # both in one batch, as the test runs them (--batch-size 2): one forward, whose floats may differ in the last bit
        rv_batch = torch.stack([preprocess(t) for t in ["good plot", "bad movie zzz"]])
        rv_expected_batch = [postprocess(out) for out in rv_model(rv_batch)]
    """
)


@pytest.fixture
def session(session, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return session


def define(ip, name: str) -> str:
    run(ip, DATA)
    run(ip, 'rv_labels.append("positive")')  # a later cell changes the literal list
    summary = run(ip, f"%%ms_handler {name} --batch-size 2\n{HANDLER}")
    run(ip, EXPECTED)  # the notebook's own computation, plain torch, the same functions
    return summary


def test_a_vocabulary_tensors_and_a_label_list_are_snapshotted_and_answer_like_the_notebook(ip, session):
    summary = define(ip, "rvlocal")
    assert "value: rv_vocab: dict (5 items)" in summary and "value: rv_labels: list (2 items)" in summary
    assert "value: rv_mean: Tensor float32 [4]" in summary and "snapshotted from the kernel" in summary
    answers = session.test("rvlocal", ["good plot", "bad movie zzz"])
    assert answers == ip.user_ns["rv_expected_batch"]
    assert {a["label"] for a in answers} <= {"negative", "positive"}


def test_nested_values_reach_the_handler_equal_element_by_element(ip, session):
    # The test imports torch itself: the shell is shared, but no earlier test may be relied on.
    run(ip, "import torch\nrv_stats = {'w': torch.randn(3), 'b': torch.arange(3)}")
    run(ip, "rv_words = [w.upper() for w in 'a b c'.split()]")
    run(ip, "rv_cfg = {}\nrv_cfg['model'] = {'head': {'sizes': (3, 1), 'act': 'relu'}}")
    body = HANDLER.split("def preprocess")[0] + textwrap.dedent(
        """
        def preprocess(sample):
            return torch.zeros(4)

        def postprocess(out):
            return {"stats": {k: v.tolist() for k, v in rv_stats.items()}, "words": rv_words, "cfg": rv_cfg,
                    "types": [type(rv_cfg["model"]["head"]["sizes"]).__name__, str(rv_stats["b"].dtype)]}
        """
    )
    run(ip, f"%%ms_handler rvnested\n{body}")
    got = session.test("rvnested", [0])[0]
    ns = ip.user_ns
    for key, tensor in ns["rv_stats"].items():
        assert got["stats"][key] == tensor.tolist()
    assert got["words"] == ns["rv_words"] == ["A", "B", "C"]
    assert got["cfg"]["model"]["head"]["act"] == "relu" and got["cfg"]["model"]["head"]["sizes"] == [3, 1]
    assert got["types"] == ["tuple", "torch.int64"]


def test_values_that_cannot_travel_fail_the_cell_with_every_name(ip, session):
    run(ip, DATA)
    fitted = (
        "class RvEstimator:\n    def fit(self, x):\n        self.seen = x\nrv_est = RvEstimator()\nrv_est.fit([1])\n"
    )
    run(ip, fitted + "rv_fn = lambda x: x")  # fitted after it was built: its statement cannot rebuild it
    body = HANDLER.replace("return (x - rv_mean) / rv_std", "return rv_fn(rv_est)")
    with capture_output() as cap:
        result = ip.run_cell(f"%%ms_handler rvbad\n{body}", store_history=True)
    shown = cap.stdout + cap.stderr
    assert not result.success and "rvbad" not in session.specs
    assert "`rv_est`" in shown and "RvEstimator" in shown and "`rv_fn`" in shown and "a function" in shown
    assert "Hint:" in shown


@pytest.mark.server
def test_a_snapshotted_value_reaches_the_torchserve_worker_and_a_later_change_makes_it_stale(ip, session):
    define(ip, "rvserved")
    magic(ip, "ms_serve", "rvserved")
    served, out = magic(ip, "ms_predict", "rvserved --data '\"good plot\"'")
    assert served == ip.user_ns["rv_expected"][0] and "Warning" not in out
    run(ip, 'rv_vocab["zzz"] = 3')  # changed in the kernel after %%ms_handler
    served, out = magic(ip, "ms_predict", "rvserved --data '\"good plot\"'")
    assert served == ip.user_ns["rv_expected"][0]  # the server still holds the snapshot
    assert "`rv_vocab`" in out and "changed since" in out
    status, _ = magic(ip, "ms_status")
    assert status["handlers"]["rvserved"]["stale"]
    assert json.loads(json.dumps(served)) == served
