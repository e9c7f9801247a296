"""Benchmark: where the notebook's Ray engine spends its cold start (`msnb.serve(name, engine="ray")` to the first
answer), phase by phase; `python -m bench.ray_cold_start [--prestart]` appends a run to bench/RAY_COLD_START.md.

Each phase is timed by wrapping the Ray call that does it (the node's processes, the driver, Serve's controller and
proxy, the router's and the model's applications). ``--prestart`` lets Ray start idle workers for the first driver
(``RAY_prestart_worker_first_driver=1``, which msnb turns off) to see whether actors start sooner on them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.harness import Steps

RESULTS = Path(__file__).parent / "RAY_COLD_START.md"
HANDLER = """
import torch

class RNet(torch.nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)

def init_function(hidden=8):
    torch.manual_seed(0)
    return RNet(hidden)

def preprocess(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)
"""


def measure() -> dict[str, float]:
    phases = Steps()
    from msnb.engines.ray import require

    require()
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    import msnb.session
    from msnb.spec import spec_from_source

    phases.mark("import msnb and ray.serve (done once per kernel)")
    phases.wrap(Cluster, "__init__", "head node up (GCS, raylet, agents)")
    phases.wrap(ray, "init", "driver connected (ray.init)")
    phases.wrap(serve, "start", "Serve's controller and HTTP proxy (serve.start)")
    phases.wrap(serve, "run", lambda *a, **k: f"application {k.get('name')} running (serve.run)")
    phases.wrap(serve, "run_many", "router deployed, not waited for (serve.run_many)")
    session = msnb.session.Session()
    spec = spec_from_source("rcold", HANDLER)
    start = time.perf_counter()
    phases.last = start
    session.serve(spec, engine="ray")
    session.server().predict("rcold", {"x": [1, 2, 3, 4]})
    phases.mark("first answer")
    phases.times["TOTAL: serve() to the first answer"] = time.perf_counter() - start
    session.stop()
    return phases.times


def write(times: dict[str, float], prestart: bool) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"\n## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load}, "
        f"prestart={'on' if prestart else 'off (msnb default)'}\n",
        "| phase | s |",
        "|---|---|",
    ]
    lines += [f"| {name} | {seconds:.2f} |" for name, seconds in times.items()]
    text = RESULTS.read_text() if RESULTS.exists() else "# Ray engine cold start, phase by phase (measured)\n"
    RESULTS.write_text(text + "\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ray_cold_start", description=__doc__)
    parser.add_argument("--prestart", action="store_true", help="RAY_prestart_worker_first_driver=1")
    args = parser.parse_args(argv)
    if args.prestart:
        os.environ["RAY_prestart_worker_first_driver"] = "1"  # before msnb.engines.ray.require() sets its default
    times = measure()
    write(times, args.prestart)
    print("\n".join(f"{seconds:7.2f} s  {name}" for name, seconds in times.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
