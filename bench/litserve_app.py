"""The LitServe side of the side-by-side: the same handler cell behind a LitAPI, as a LitServe user writes it.

Run as ``python -m bench.litserve_app PORT CHECKPOINT WIDTH DEPTH REVISION MAX_BATCH BATCH_TIMEOUT_S``.
"""

from __future__ import annotations

import sys

import litserve as ls
import torch

from bench import models
from bench.litserve_compat import without_mcp


class CellAPI(ls.LitAPI):
    """The benchmark's MLP cell: init_function + weights in setup, preprocess/postprocess per request."""

    def __init__(self, checkpoint: str, init_kwargs: dict, revision: int, **batching):
        super().__init__(**batching)
        self.checkpoint, self.init_kwargs, self.revision = checkpoint, init_kwargs, revision

    def setup(self, device):
        self.cell: dict = {}
        exec(compile(models.mlp_source(self.revision), "<cell>", "exec"), self.cell)
        self.model = self.cell["init_function"](**self.init_kwargs)
        self.model.load_state_dict(torch.load(self.checkpoint, weights_only=True))
        self.model.eval()

    def decode_request(self, request):
        return self.cell["preprocess"](request)

    def batch(self, inputs):
        return torch.stack(inputs)

    def predict(self, x):
        with torch.inference_mode():
            return self.model(x)

    def unbatch(self, output):
        return list(output)

    def encode_response(self, output):
        return self.cell["postprocess"](output)


def main(argv: list[str]) -> None:
    port, checkpoint, width, depth, revision, max_batch, timeout = argv
    api = CellAPI(
        checkpoint,
        {"width": int(width), "depth": int(depth)},
        int(revision),
        max_batch_size=int(max_batch),
        batch_timeout=float(timeout),
    )
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    without_mcp()  # bench/litserve_compat.py
    server.run(host="127.0.0.1", port=int(port), generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
