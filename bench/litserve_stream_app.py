"""The LitServe side of the streaming comparison: the same cell behind a streaming LitAPI (`stream=True`, generator
`predict` and `encode_response`), as a LitServe user writes it. Run as ``python -m bench.litserve_stream_app PORT
CHECKPOINT``."""

from __future__ import annotations

import sys

import litserve as ls
import torch

from bench import stream_model
from bench.litserve_compat import without_mcp


class StreamAPI(ls.LitAPI):
    def __init__(self, checkpoint: str):
        super().__init__(stream=True)
        self.checkpoint = checkpoint

    def setup(self, device):
        self.cell = stream_model.cell()
        self.model = self.cell["init_function"]()
        self.model.load_state_dict(torch.load(self.checkpoint, weights_only=True))
        self.model.eval()

    def decode_request(self, request):
        return self.cell["preprocess"](request)

    def predict(self, x):
        with torch.inference_mode():
            yield from self.cell["inference"](self.model, x[None])

    def encode_response(self, outputs):
        for step in outputs:
            yield self.cell["postprocess"](step[0])


def main(argv: list[str]) -> None:
    port, checkpoint = argv
    server = ls.LitServer(StreamAPI(checkpoint), accelerator="cpu", workers_per_device=1)
    without_mcp()  # bench/litserve_compat.py
    server.run(host="127.0.0.1", port=int(port), generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
