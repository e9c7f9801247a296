"""LitServe's OpenAI-compatible server (``OpenAISpec``) streaming the same text generator as bench/openai_speed_cell.py,
as a LitServe user writes it. Run as ``python -m bench.litserve_openai_app PORT``; loopback only."""

from __future__ import annotations

import sys

import litserve as ls

from bench.litserve_compat import without_mcp
from bench.openai_speed_cell import TOKENS, piece


class GeneratorAPI(ls.LitAPI):
    def setup(self, device) -> None:
        self.model = None

    def predict(self, messages):
        for token in range(TOKENS):
            yield piece(token)


def main(argv: list[str]) -> None:
    server = ls.LitServer(GeneratorAPI(spec=ls.OpenAISpec()))
    without_mcp()  # bench/litserve_compat.py
    server.run(host="127.0.0.1", port=int(argv[0]), generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
