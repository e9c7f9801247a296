"""The streaming speed test's handler cell: LitServe's own speed test written as an msnb user writes it (a generator
``inference`` yields each step's batch output, ``postprocess`` turns a sample's piece into one JSON chunk)."""

TOKENS = 10_000  # LitServe's speed test streams this many tokens per request
CELL = f"""
import torch

def init_function():
    return torch.nn.Identity()

def preprocess(request):
    return torch.tensor(request["input"])

def inference(model, batch):
    for token in range({TOKENS}):
        yield torch.full_like(batch, token)

def postprocess(step):
    return {{"output": int(step)}}
"""
