"""Benchmark: where a Ray start goes, step by step, msnb's beside Ray's own floor in the same run, interleaved.

`python -m bench.ray_start_steps [--archives 1 8] [--rounds 2] [--kinds ...] [--before DIR]` appends one run to
bench/RAY_START.md. Each start runs in a fresh Python process (its imports counted), the variants one after another
round by round:

- **floor**: Ray's own start and nothing else: ``ray.init`` (loopback, no dashboard), ``serve.start``, one
  ``serve.run_many`` of N one-line applications asking no CPU, the first HTTP answer of each;
- **msnb**: `msnb serve A.mar ... --engine ray`'s path (``LocalRay.start`` and ``deploy_archives``) for N archives
  made by torch-model-archiver, each answered once through msnb's front, every Ray call of the way timed
  (``--before DIR``: the same from an earlier msnb tree as well);
- **torchserve**: a TorchServe registering the same archives one after another;
- **shared**: the archives on `msnb ray up`'s Ray, up before the rounds; **cell** / **cell-shared**:
  ``%ms_serve NAME --engine ray``'s path of a tiny cell on its own Ray / on `msnb ray up`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import Steps

RESULTS = Path(__file__).parent / "RAY_START.md"
SAMPLE = {"x": [0.5, -1.0, 2.0, 0.25]}


def floor(n: int) -> dict[str, float]:
    """Ray's own start: one-line applications asking no CPU, answered once each over Serve's HTTP proxy."""
    steps = Steps()
    from msnb.engines.ray import require

    require()
    import ray
    import requests  # noqa: F401  (imported here: counted with Ray's imports)
    from ray import serve  # noqa: F401

    steps.mark("import ray.serve")
    root = tempfile.mkdtemp(prefix="rfl-", dir="/tmp")  # a new local Ray of its own (never another's)
    try:
        return _floor(n, steps, root)
    finally:  # a node start that timed out too
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _floor(n: int, steps: Steps, root: str) -> dict[str, float]:
    import ray
    import requests
    from ray import serve

    from msnb.engines.ray.nodes import LOOPBACK, free_port

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address=LOOPBACK,
        _temp_dir=root,
        log_to_driver=False,
    )
    steps.mark("ray.init (GCS, raylet, agents, driver)")
    port = free_port()
    serve.start(http_options={"host": LOOPBACK, "port": port})
    steps.mark("serve.start (controller, proxy)")

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def echo(request) -> str:
        return "ok"

    targets = [serve.RunTarget(echo.bind(), name=f"a{i}", route_prefix=f"/a{i}") for i in range(n)]
    serve.run_many(targets)
    steps.mark("serve.run_many (replicas running)")
    for i in range(n):
        requests.get(f"http://{LOOPBACK}:{port}/a{i}", timeout=60).raise_for_status()
    steps.mark("first answers")
    times = steps.total()
    serve.shutdown()
    return times


def msnb(archives: list[Path]) -> dict[str, float]:
    """`msnb serve A.mar ... --engine ray`'s path, each Ray call of the way timed."""
    steps = Steps()
    from msnb.engines.ray import require

    require()
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from msnb.cli.serve_archives import deploy_archives
    from msnb.engines.ray import engine as ray_engine
    from msnb.engines.ray import ingress

    steps.mark("import msnb and ray.serve")
    steps.wrap(Cluster, "__init__", "head node (GCS, raylet, agents)")
    steps.wrap(ray, "init", "driver connected (ray.init)")
    steps.wrap(serve, "start", "serve.start (controller, proxy)")
    steps.wrap(ingress, "ready" if hasattr(ingress, "ready") else "spawn", "msnb's ingress ready")
    steps.wrap(ray_engine.LocalRay, "_router_running", "replicas deployed, router running")
    engine = ray_engine.LocalRay()
    engine.start()
    steps.mark("the rest of LocalRay.start")
    with contextlib.redirect_stdout(io.StringIO()):
        deploy_archives(engine, archives)
    steps.mark("archives opened, replicas running (import, initialize)")
    for path in archives:
        engine.predict(path.stem, SAMPLE)
    steps.mark("first answers (through msnb's front)")
    times = steps.total()
    engine.stop()
    return times


def on_shared(archives: list[Path]) -> dict[str, float]:
    """The same archives on the shared Ray of `msnb ray up` (started before, outside the timing)."""
    steps = Steps()
    from msnb.engines.ray import require

    require()
    from msnb.cli.serve_archives import deploy_archives
    from msnb.engines.ray.shared import attached

    steps.mark("import msnb and ray.serve")
    engine = attached().start()
    steps.mark("attached to the shared Ray (ray.init)")
    with contextlib.redirect_stdout(io.StringIO()):
        deploy_archives(engine, archives)
    steps.mark("archives opened, replicas running (import, initialize)")
    return _answered(engine, archives, steps)


def torchserve(archives: list[Path]) -> dict[str, float]:
    """A TorchServe (msnb's LocalServer: Java, token auth) registering the archives one after another."""
    steps = Steps()
    from msnb.engines.torchserve import LocalServer

    steps.mark("import msnb")
    server = LocalServer().start()
    steps.mark("TorchServe started")
    for path in archives:
        server.register(path)
    steps.mark("archives registered")
    return _answered(server, archives, steps)


def cell() -> dict[str, float]:
    """`%ms_serve NAME --engine ray` of a cell (the shared Ray when `msnb ray up` is up), to its first answer."""
    steps = Steps()
    import msnb.session
    from msnb.spec import spec_from_source

    steps.mark("import msnb")
    session = msnb.session.Session()
    session.serve(spec_from_source("cell", CELL), engine="ray")
    steps.mark("served (Ray started or attached, the replica running)")
    session.server().predict("cell", SAMPLE)
    steps.mark("first answer")
    times = steps.total()
    session.stop()
    return times


def replica_imports() -> dict[str, float]:
    """What a replica's process imports before its model's ``initialize``, step by step, in a fresh process (as a new
    Ray worker: Python started, then Ray, then the actor's code)."""
    steps = Steps()
    import ray  # noqa: F401 - timed

    steps.mark("import ray (every Ray worker)")
    from ray import serve  # noqa: F401 - timed

    steps.mark("ray.serve (a replica)")
    import msnb.templates.msnb_runtime.ray.app  # noqa: F401 - timed

    steps.mark("msnb's replica code (msnb_runtime.ray.app)")
    import torch  # noqa: F401 - timed

    steps.mark("torch")
    import ts.model_loader
    import ts.service  # noqa: F401 - timed

    steps.mark("TorchServe's worker code (ts.model_loader, ts.service)")
    return steps.total()


CELL = """
import torch

def init_function():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

def preprocess(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)
"""


def _answered(engine, archives: list[Path], steps: Steps) -> dict[str, float]:
    for path in archives:
        engine.predict(path.stem, SAMPLE)
    steps.mark("first answers")
    times = steps.total()
    engine.stop()
    return times


def one(kind: str, n: int, work: Path, source: Path | None = None, extra: dict | None = None) -> dict[str, float]:
    """One start of ``kind`` in a fresh process (its imports counted); ``source``: msnb imported from that tree."""
    here = str(Path(__file__).resolve())
    code = (
        f"import importlib.util, json; spec = importlib.util.spec_from_file_location('steps', {here!r}); "
        "b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b); "
        f"print('RESULT', json.dumps(b._child({kind!r}, {n}, {str(work)!r})))"
    )
    env = {**os.environ, **(extra or {}), **({"PYTHONPATH": str(source)} if source else {})}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=work, env=env)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{kind} {n} failed:\n{out.stderr[-3000:]}")
    return json.loads(line[7:])


def _child(kind: str, n: int, work: str) -> dict[str, float]:
    archives = [Path(work) / f"tiny{i}" / f"tiny{i}.mar" for i in range(n)]
    kinds = {
        "floor": lambda: floor(n),
        "msnb": lambda: msnb(archives),
        "shared": lambda: on_shared(archives),
        "torchserve": lambda: torchserve(archives),
        "cell": cell,
        "cell-shared": cell,
        "replica-imports": replica_imports,
    }
    return kinds[kind]()


# cell-shared: the cell on `msnb ray up`'s Ray; replica-imports: what a replica's process imports, timed alone
KINDS = ("floor", "torchserve", "msnb", "shared", "cell", "cell-shared", "replica-imports")


def run(counts: list[int], rounds: int, before: Path | None, kinds: list[str]) -> tuple[dict, str]:
    """Every variant once per round, one after another (``before``: msnb from an earlier tree as well): the ratios
    hold under another's load. With ``shared`` or ``cell-shared`` a `msnb ray up` comes first (its start untimed);
    returns the results and what `msnb ray status` said of it at rest, before the rounds."""
    variants = {k: (k, None) for k in kinds}
    if before:
        variants = {
            **{k: v for k, v in variants.items() if k != "msnb"},
            "msnb before": ("msnb", before),
            "msnb": ("msnb", None),
        }
    results: dict[str, list[dict[str, float]]] = {}
    from bench.ray_archives import build

    with tempfile.TemporaryDirectory(prefix="msnb-bench-") as tmp, _shared_up(Path(tmp), kinds) as (state, at_rest):
        for i in range(max(counts)):
            build(Path(tmp), f"tiny{i}")  # made by torch-model-archiver, once for every start
        for _ in range(rounds):
            for n in counts:
                for label, (kind, source) in variants.items():
                    if kind.startswith("cell") and n != counts[0]:
                        continue
                    print(f"{label} {n} ...", flush=True)
                    env = {"MSNB_STATE_DIR": str(state if kind in ("shared", "cell-shared") else Path(tmp) / "none")}
                    results.setdefault(f"{label} {n}", []).append(retried(kind, n, Path(tmp), source, env))
    return results, at_rest


@contextlib.contextmanager
def _shared_up(work: Path, kinds: list[str]):
    state = work / "state"
    if not {"shared", "cell-shared"} & set(kinds):
        yield state, ""
        return
    os.environ["MSNB_STATE_DIR"] = str(state)
    from msnb.engines.ray import shared

    shared.up()
    try:
        time.sleep(20)  # (not a synchronisation: the Ray settles before its memory at rest is read)
        yield state, shared.status()
    finally:
        shared.down()
        os.environ.pop("MSNB_STATE_DIR")


FAILED: dict[str, int] = {}  # starts that failed and were made again (Ray's node start times out under load)


def retried(kind: str, n: int, work: Path, source: Path | None, env: dict, tries: int = 3) -> dict[str, float]:
    for attempt in range(tries):
        try:
            return one(kind, n, work, source, env)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            key = f"{kind}{' before' if source else ''} {n}"
            FAILED[key] = FAILED.get(key, 0) + 1
            print(f"failed, made again: {str(err)[-300:]}", flush=True)
            if attempt == tries - 1:
                raise


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {step: statistics.median(r[step] for r in runs) for step in runs[0]}


def append(results: dict, at_rest: str, load: list[float], note: str) -> str:
    lines = [
        f"\n## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at start "
        f"{', '.join(f'{x:.1f}' for x in load)}, after {', '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    ]
    for key, runs in results.items():
        totals = ", ".join(f"{r['TOTAL']:.1f}" for r in runs)
        lines += [f"\n**{key}** ({len(runs)} runs; totals {totals} s; medians per step)\n", "| step | s |", "|---|---|"]
        lines += [f"| {step} | {s:.2f} |" for step, s in medians(runs).items()]
    counts = sorted({int(k.rsplit(maxsplit=1)[1]) for k in results})
    labels = [k.rsplit(maxsplit=1)[0] for k in results if k.endswith(f" {counts[0]}") and not k.startswith("floor")]
    lines += ["\n| archives | " + " | ".join(f"{x} / floor" for x in labels) + " |", "|---|" + "---|" * len(labels)]
    for n in counts if f"floor {counts[0]}" in results else []:
        base = medians(results[f"floor {n}"])["TOTAL"]
        ratios = [
            f"{medians(results[f'{x} {n}'])['TOTAL'] / base:.2f}" if f"{x} {n}" in results else "–" for x in labels
        ]
        lines.append(f"| {n} | " + " | ".join(ratios) + " |")
    lines += [f"\nStarts that failed and were made again: {FAILED}."] if FAILED else []
    lines += ["\n`msnb ray status` at rest, before the rounds:\n", "```text", at_rest, "```"] if at_rest else []
    lines += ["", note] if note else []
    head = (
        RESULTS.read_text() if RESULTS.exists() else f"# Ray's start, step by step, beside its own floor\n\n{__doc__}"
    )
    text = "\n".join(lines) + "\n"
    RESULTS.write_text(head + text)
    return text


PLOT = Path(__file__).parent / "ray_start.png"


def plot(results: dict, path: Path = PLOT) -> None:
    """Bars: each variant's median seconds to its first answers (its runs as dots), one run's variants side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(results)))
    for i, runs in enumerate(results.values()):
        totals = [r["TOTAL"] for r in runs]
        ax.barh(i, statistics.median(totals), color="#9bb7d4")
        ax.plot(totals, [i] * len(totals), "k.", markersize=5)
    ax.set_yticks(range(len(results)), list(results))
    ax.invert_yaxis()
    ax.set_xlabel("s, from a fresh process to every first answer (bar: median; dots: runs)")
    ax.set_title(f"Ray's start, interleaved rounds, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ray_start_steps", description=__doc__)
    parser.add_argument("--archives", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", type=Path, help="an earlier msnb tree (msnb/ with templates/ inside) to run beside")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=["floor", "msnb"], help="the variants run")
    parser.add_argument("--note", default="", help="a line written under the run's tables")
    args = parser.parse_args(argv)
    load = list(os.getloadavg())
    results, at_rest = run(args.archives, args.rounds, args.before, args.kinds)
    print(append(results, at_rest, load, args.note))
    plot(results)


if __name__ == "__main__":
    main(sys.argv[1:])
