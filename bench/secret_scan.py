"""The secret scan in the edit loop: what `notebook_secrets.check` adds to a capture, for a typical handler cell with
its pulled-in definitions and runtime values, a large vocabulary (first capture, then unchanged), and a 5 MB literal."""

from __future__ import annotations

import textwrap

from bench.harness import Settings, interleave, summary, timed
from msnb.capture import notebook_secrets
from msnb.capture.cells import capture
from msnb.spec import SourceBlock

CELL = textwrap.dedent(
    """
    import json
    import torch

    LABELS = ["negative", "neutral", "positive"]

    def init_function(hidden=64):
        torch.manual_seed(0)
        return TextNet(len(vocab), hidden, len(LABELS))

    def preprocess(sample):
        ids = [vocab.get(w, 0) for w in sample["text"].lower().split()][: config["max_len"]]
        return torch.tensor(ids + [0] * (config["max_len"] - len(ids)))

    def postprocess(output):
        scores = torch.softmax(output, -1).tolist()
        return {"label": LABELS[int(output.argmax())], "scores": scores, "model": config["name"]}
    """
)
NET = textwrap.dedent(
    """
    import torch

    class TextNet(torch.nn.Module):
        def __init__(self, words, hidden, classes):
            super().__init__()
            self.embed = torch.nn.EmbeddingBag(words, hidden)
            self.out = torch.nn.Linear(hidden, classes)

        def forward(self, ids):
            return self.out(self.embed(ids))
    """
)
POOL = [("cell In[2]", NET), ("cell In[3]", "vocab = build_vocab()\nconfig = load_config()\n")]
BUDGET_MS = 20  # what a capture of a typical cell may gain from the scan and still feel instant


def vocabulary(words: int) -> dict[str, int]:
    return {f"{'tok' if i % 3 else 'word'}{i}_{'x' * (i % 7)}": i for i in range(words)}


def namespace(words: int) -> dict:
    config = {"name": "sentiment-v2", "max_len": 32, "labels": ["negative", "neutral", "positive"], "dropout": 0.1}
    return {"vocab": vocabulary(words), "config": config}


def run(settings: Settings) -> dict:
    words = settings.size(5_000, 5_000, 500)
    big_words = settings.size(200_000, 50_000, 2_000)
    literal = settings.size(5_000_000, 1_000_000, 50_000)
    ns, big = namespace(words), namespace(big_words)
    spec = capture("sent", CELL, POOL, namespace=ns)
    blocks = spec.blocks
    huge = (SourceBlock(f"DATA = {'x' * literal!r}\n", "cell In[4]"),)
    variants = {
        "capture / typical cell, 5k-word vocabulary": lambda: timed(lambda: capture("sent", CELL, POOL, namespace=ns)),
        "scan / its code": lambda: timed(lambda: _check(blocks, {}, {})),
        "scan / its code and values, first time": lambda: timed(lambda: _check(blocks, ns, {})),
        f"scan / a {big_words:,}-word vocabulary, first time": lambda: timed(lambda: _check((), big, {})),
        f"scan / a {big_words:,}-word vocabulary, unchanged": lambda: timed(lambda: _check((), big, _digests(big))),
        f"scan / a {literal / 1e6:g} MB literal in code": lambda: timed(lambda: _check(huge, {}, {})),
    }
    _check((), big, _digests(big))  # the unchanged row reads the cache this fills
    results = interleave(variants, settings.reps)
    stats = {name: summary([v * 1000 for v in values]) for name, values in results.items()}
    return report(stats)


def _check(blocks, values: dict, digests: dict) -> tuple:
    carried = notebook_secrets.Carried(values, {}, {}, digests)
    return notebook_secrets.check("bench", blocks, carried)


def _digests(values: dict) -> dict[str, str]:
    return {name: f"bench-{id(value)}" for name, value in values.items()}


def report(stats: dict) -> dict:
    typical = stats["scan / its code and values, first time"]["median"]
    return {
        "title": "Secret scan: what it adds to a capture",
        "unit": "ms",
        "rows": stats,
        "targets": [
            {
                "target": f"a typical cell with its values scans in under {BUDGET_MS} ms",
                "value": f"{typical:.1f} ms",
                "met": typical < BUDGET_MS,
            }
        ],
        "notes": "A text passes a gate first (str.find over the lower-cased text for the words and prefixes every "
        "detector's match holds, two small regexes); detect-secrets' own patterns and detectors then run on the "
        "few lines it passes, and a long line only in windows around them. A value's scan is cached by its "
        "snapshot's digest: an unchanged value costs nothing the next time its cell runs.",
    }
