"""The OpenAI speed test's generator: TOKENS text pieces, as an msnb handler cell (a generator ``inference``, one str
piece per step through ``postprocess``) and as the same pieces LitServe's ``predict`` yields."""

TOKENS = 2_000  # pieces per completion


def piece(token: int) -> str:
    """The text of step ``token``."""
    return f" t{token}"


CELL = f"""
import torch

def init_function():
    return torch.nn.Identity()

def preprocess(request):
    return torch.tensor(len(request["messages"]))

def inference(model, batch):
    for token in range({TOKENS}):
        yield torch.full_like(batch, token)

def postprocess(step):
    return f" t{{int(step)}}"
"""
