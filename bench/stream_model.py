"""The streaming benchmarks' model: a character GRU LM whose greedy steps do measurable work, as a handler cell
(a generator `inference`) and as plain torch, shared by msnb's engines and the LitServe app."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch

STEPS = 32
HIDDEN = 384
PROMPT = "the cat sat on the mat and the dog ate the log. " * 4  # 192 characters: each step runs the GRU over them
CELL = textwrap.dedent(
    f"""
    import torch

    CHARS = "abcdefghijklmnopqrstuvwxyz .,"

    class CharLM(torch.nn.Module):
        def __init__(self, vocab=29, hidden={HIDDEN}):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, hidden)
            self.rnn = torch.nn.GRU(hidden, hidden, batch_first=True)
            self.out = torch.nn.Linear(hidden, vocab)

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.out(h)

    def init_function():
        torch.set_num_threads(1)  # the same compute on every server (and in-process): one thread each
        return CharLM()

    def preprocess(prompt):
        return torch.tensor([max(CHARS.find(c), 0) for c in prompt.lower()])

    def inference(model, batch):
        ids = batch
        for _ in range({STEPS}):
            nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
            yield nxt[:, 0]

    def postprocess(step):
        return CHARS[int(step)]
    """
)


def cell() -> dict:
    """The cell's names, executed here (the reference, and LitServe's API)."""
    namespace: dict = {}
    exec(compile(CELL, "<stream cell>", "exec"), namespace)
    return namespace


def save_checkpoint(path: Path) -> Path:
    torch.manual_seed(0)
    torch.save(cell()["CharLM"]().state_dict(), path)
    return path
