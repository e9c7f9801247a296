"""LitServe's own streaming speed test server (its CI's ``tests/perf_test/stream/stream_speed/server.py``): one
request streams 10,000 ``{"output": i}`` lines. Run as ``python -m bench.litserve_speed_app PORT``; loopback only."""

from __future__ import annotations

import sys

import litserve as ls

from bench.litserve_compat import without_mcp
from bench.stream_speed_cell import TOKENS


class SimpleStreamingAPI(ls.LitAPI):
    def setup(self, device) -> None:
        self.model = None

    def decode_request(self, request):
        return request["input"]

    def predict(self, x):
        yield from range(TOKENS)

    def encode_response(self, output_stream):
        for output in output_stream:
            yield {"output": output}


def main(argv: list[str]) -> None:
    server = ls.LitServer(SimpleStreamingAPI(), stream=True)
    without_mcp()  # bench/litserve_compat.py
    server.run(host="127.0.0.1", port=int(argv[0]), generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
