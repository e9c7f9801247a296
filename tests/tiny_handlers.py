"""Tiny handler sources shared by the test tiers (no model downloads: each builds its own model)."""

import textwrap

MLP_CLASS = textwrap.dedent(
    '''
    class MLP(torch.nn.Module):
        def __init__(self, hidden=8):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, hidden)
            self.fc2 = torch.nn.Linear(hidden, 3)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))
    '''
)


def mlp_class(name: str = "MLP") -> str:
    """The source of a tiny 4 -> hidden -> 3 MLP class called ``name`` (it needs ``torch`` imported)."""
    return MLP_CLASS.replace("class MLP(", f"class {name}(")


MLP_SOURCE = "\nimport torch\n" + MLP_CLASS + textwrap.dedent(
    '''
    def init_function(hidden=8):
        torch.manual_seed(0)
        return MLP(hidden)

    def preprocess(sample):
        if not isinstance(sample, dict) or "x" not in sample:
            raise ValueError("expected a JSON object with key 'x' (4 numbers)")
        values = torch.tensor(sample["x"], dtype=torch.float32)
        if values.shape != (4,):
            raise ValueError(f"'x' must hold 4 numbers, got shape {tuple(values.shape)}")
        return values

    def postprocess(output):
        return {"label": int(output.argmax()), "scores": [round(float(v), 5) for v in output]}
    '''
)
