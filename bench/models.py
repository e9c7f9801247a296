"""The benchmark models as handler-cell sources, their checkpoints, and the hand-written TorchServe handler anchor."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch

from msnb.spec import HandlerSpec, spec_from_source

# A handler cell as a user writes it: model class, init_function, preprocess, postprocess.
MLP_SOURCE = textwrap.dedent(
    """
    import torch

    REVISION = {revision}

    class MLP(torch.nn.Module):
        def __init__(self, width=256, depth=2, inputs=64, classes=10):
            super().__init__()
            sizes = [inputs] + [width] * depth
            layers = []
            for a, b in zip(sizes, sizes[1:]):
                layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
            self.body = torch.nn.Sequential(*layers, torch.nn.Linear(width, classes))

        def forward(self, x):
            return self.body(x)

    def init_function(width=256, depth=2):
        return MLP(width, depth)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {{"label": int(output.argmax()), "revision": REVISION}}
    """
)

# A model that is nothing but weights: CHUNK-float parameters adding up to `mib` MiB.
BLOB_SOURCE = textwrap.dedent(
    """
    import torch

    CHUNK = 2 ** 20  # floats: 4 MiB per parameter

    class Blob(torch.nn.Module):
        def __init__(self, mib=100):
            super().__init__()
            n = max(1, mib // 4)
            self.chunks = torch.nn.ParameterList([torch.nn.Parameter(torch.empty(CHUNK)) for _ in range(n)])

        def forward(self, x):
            return x * self.chunks[0][0]

    def init_function(mib=100):
        return Blob(mib)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {"sum": float(output.sum())}
    """
)

# The anchor: the minimal TorchServe handler a user writes by hand for the same cell (appended to it).
HANDWRITTEN_HANDLE = textwrap.dedent(
    """

    _model = None

    def handle(data, context):
        global _model
        if _model is None:
            model_dir = context.system_properties["model_dir"]
            weights = context.manifest["model"]["serializedFile"]
            _model = init_function(**INIT_KWARGS)
            _model.load_state_dict(torch.load(f"{model_dir}/{weights}", weights_only=True))
            _model.eval()
        if data is None:
            return None
        with torch.inference_mode():
            batch = torch.stack([preprocess(row.get("data") or row.get("body")) for row in data])
            return [postprocess(out) for out in _model(batch)]
    """
)

SMALL = {"width": 256, "depth": 2}  # FACTS' tiny MLP: frontend-bound
WIDE = {"width": 2048, "depth": 3}  # compute-bound: ~34 MB of weights read per forward
SAMPLE = {"x": [0.01 * i for i in range(64)]}


def mlp_source(revision: int = 0) -> str:
    return MLP_SOURCE.format(revision=revision)


def mlp_spec(name: str, init_kwargs: dict, checkpoint: Path, revision: int = 0, **config) -> HandlerSpec:
    return spec_from_source(
        name, mlp_source(revision), init_kwargs=init_kwargs, checkpoint=str(checkpoint), example=SAMPLE, **config
    )


def blob_spec(name: str, mib: int, checkpoint: Path) -> HandlerSpec:
    return spec_from_source(
        name, BLOB_SOURCE, init_kwargs={"mib": mib}, checkpoint=str(checkpoint), example={"x": [1.0, 2.0]}
    )


def handwritten_source(cell_source: str, init_kwargs: dict) -> str:
    """The cell plus a module-level ``handle``: json in -> model -> json out, no per-sample isolation."""
    return cell_source + f"\nINIT_KWARGS = {init_kwargs!r}\n" + HANDWRITTEN_HANDLE


def _instantiate(source: str, init_kwargs: dict) -> torch.nn.Module:
    namespace: dict = {}
    exec(compile(source, "<bench model>", "exec"), namespace)
    return namespace["init_function"](**init_kwargs)


def save_mlp_checkpoint(init_kwargs: dict, path: Path) -> Path:
    torch.manual_seed(0)
    torch.save(_instantiate(mlp_source(), init_kwargs).state_dict(), path)
    return path


def mlp_model(init_kwargs: dict, checkpoint: Path) -> torch.nn.Module:
    """The cell's model with the checkpoint's weights, in plain torch: the truth the servers are checked against."""
    model = _instantiate(mlp_source(), init_kwargs)
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    return model.eval()


def save_random_blob(mib: int, path: Path) -> Path:
    """A random state_dict of ``mib`` MiB (incompressible floats) that the Blob model loads strictly."""
    torch.manual_seed(0)
    n = max(1, mib // 4)
    state = {f"chunks.{i}": torch.randn(2**20) for i in range(n)}
    torch.save(state, path)
    del state
    return path
