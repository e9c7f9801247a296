"""`msnb compare A.mar --data @requests.jsonl`: the archives served by a plain TorchServe and by Ray Serve side by
side, every request sent to both, a table of statuses and equal-or-first-difference; exit 0 only when all agree."""

from __future__ import annotations

import sys
from pathlib import Path

from msnb.errors import OptionError


def run_compare(archives: list[Path], data: str, envelope: str | None, register_each) -> int:
    """Start both servers, serve ``archives`` on each (``register_each``: `msnb serve`'s TorchServe registration),
    send every request of ``data`` (``@requests.jsonl``) to both, print the table; 0 when all agree, else 1."""
    from msnb.cli.serve_ray import deploy_archives
    from msnb.engines import compare
    from msnb.engines.ray.engine import LocalRay
    from msnb.engines.torchserve import LocalServer

    path = requests_file(data)
    # the envelope on both sides: TorchServe's service_envelope, the Ray applications' envelope argument
    server = LocalServer(properties={"service_envelope": envelope} if envelope else None)
    from msnb.engines.ray.shared import attached

    ray = attached() or LocalRay()  # the shared Ray (`msnb ray up`) when it is up
    try:
        print("starting TorchServe and Ray Serve (loopback, token auth on) ...", flush=True)
        server.start()
        on_torchserve = set(register_each(server, archives, {}))
        ray.start()
        on_ray = set(deploy_archives(ray, archives, envelope))
        both = sorted(on_torchserve & on_ray)
        rows = compare.compare(server, ray, compare.read_requests(path, both))
    finally:
        ray.stop()
        server.stop()
    print(compare.table(rows))
    agreed = sum(diff is None for *_, diff in rows)
    print(f"{agreed} of {len(rows)} requests answered alike; served on both: {', '.join(both)}")
    if agreed == len(rows) and len(both) == len(archives):
        return 0
    print("error: the engines disagree (see the table above)", file=sys.stderr)
    print("Hint: each row names the first difference; docs/ray.md lists where a Ray replica's worker differs "
          "from TorchServe's.", file=sys.stderr)  # fmt: skip
    return 1


def requests_file(data: str) -> Path:
    """The request file of ``--data @FILE``; refused before anything starts when it is not one."""
    path = Path(data[1:]) if data.startswith("@") else None
    if path is None or not path.is_file():
        raise OptionError(
            f"--data {data!r}: no request file there.",
            "give --data @requests.jsonl: one JSON request a line (see `msnb compare --help`).",
        )
    return path
