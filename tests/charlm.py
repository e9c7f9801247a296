"""The streaming tests' model: a tiny character LM (its source as a notebook cell defines it, the generator
handler cell that streams its greedy generation) and the truth, greedy generation in plain torch."""

from __future__ import annotations

import textwrap

import torch

STEPS = 24
CHARS = "abcdefghijklmnopqrstuvwxyz .,"
MODEL_SOURCE = textwrap.dedent(
    f"""
    import torch

    CHARS = {CHARS!r}
    STOI = {dict((c, i) for i, c in enumerate(CHARS))!r}

    class CharLM(torch.nn.Module):
        def __init__(self, vocab, hidden=32):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, hidden)
            self.rnn = torch.nn.GRU(hidden, hidden, batch_first=True)
            self.out = torch.nn.Linear(hidden, vocab)

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.out(h)
    """
)
TRAIN_SOURCE = textwrap.dedent(
    """
    torch.manual_seed(0)
    TEXT = "the cat sat on the mat. the dog ate the log. " * 4
    lm = CharLM(len(CHARS))
    opt = torch.optim.Adam(lm.parameters(), lr=0.02)
    data = torch.tensor([[STOI[c] for c in TEXT]])
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(lm(data[:, :-1])[0], data[0, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(lm.state_dict(), "lm.pth")
    """
)
HANDLER_BODY = textwrap.dedent(
    f"""
    def init_function():
        return CharLM(len(CHARS))

    def preprocess(prompt):
        return torch.tensor([STOI.get(c, 0) for c in prompt.lower()])

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


def greedy(model: torch.nn.Module, prompt: str, steps: int = STEPS) -> list[str]:
    """The notebook's own generation: one character per step, each the argmax after the text so far."""
    stoi = {c: i for i, c in enumerate(CHARS)}
    ids = torch.tensor([[stoi.get(c, 0) for c in prompt.lower()]])
    out = []
    with torch.no_grad():
        for _ in range(steps):
            nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
            out.append(CHARS[int(nxt)])
    return out


def char_lm() -> type:
    """The CharLM class, built from MODEL_SOURCE (as the notebook defines it)."""
    namespace: dict = {}
    exec(MODEL_SOURCE, namespace)
    return namespace["CharLM"]


# The same LM asked through OpenAI's API: the request body is the sample (chat messages or a completions prompt),
# the weights seeded in init_function (no checkpoint), the cell's docstring its MCP tool's description.
API_DOC = "Continues a lowercase text, one character per step (a tiny character LM)."
API_BODY = f'"""{API_DOC}"""\n' + HANDLER_BODY.replace(
    "def preprocess(prompt):\n    return torch.tensor([STOI.get(c, 0) for c in prompt.lower()])",
    "def preprocess(request):\n"
    "    text = request['messages'][-1]['content'] if 'messages' in request else request['prompt']\n"
    "    return torch.tensor([STOI.get(c, 0) for c in text.lower()])",
).replace("    return CharLM(", "    torch.manual_seed(0)\n    return CharLM(")


def seeded_char_lm() -> torch.nn.Module:
    """API_BODY's model, built here independently: CharLM with the weights its init_function seeds."""
    torch.manual_seed(0)
    return char_lm()(len(CHARS)).eval()
