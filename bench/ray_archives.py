"""Benchmark: archives torch-model-archiver made, served by `msnb serve --engine ray`'s path (one Ray start, the
archives packed into replica sets, at most 8 to a replica process, started by one Serve call) beside a plain
TorchServe registering the same archives: cold start to every first answer for 1 and for 8 archives, with the PSS
and the count of the serving tree's processes once every archive answered, the 8 archives also with a replica each
(``--models-per-replica 1``: as before replica sets); then one tiny-MLP archive under 16 clients (req/s, p50, p99)
while all 8 are served; the runs interleaved."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from bench.harness import Settings, inference_headers, interleave, load, msnb_engine, stop_engine, summary

CLIENTS, BATCH, DELAY_MS = 16, 8, 5
SAMPLE = {"x": [0.5, -1.0, 2.0, 0.25]}
HANDLER = textwrap.dedent("""
    import torch

    _net = None

    def handle(data, context):
        global _net
        if data is None:
            torch.manual_seed(0)
            _net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()
            return None
        with torch.inference_mode():
            rows = torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)
            return [[round(v, 5) for v in out.tolist()] for out in _net(rows)]
""")


def build(work: Path, name: str, version: str = "1.0") -> Path:
    """One tiny-MLP archive made by torch-model-archiver (batchSize 8, maxBatchDelay 5 ms)."""
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.py").write_text(HANDLER)
    (folder / "model-config.yaml").write_text(f"batchSize: {BATCH}\nmaxBatchDelay: {DELAY_MS}\n")
    archiver = Path(sys.executable).with_name("torch-model-archiver")
    subprocess.run(
        [
            str(archiver),
            "--model-name",
            name,
            "--version",
            version,
            "--handler",
            str(folder / "tiny.py"),
            "--config-file",
            str(folder / "model-config.yaml"),
            "--export-path",
            str(folder),
            "-f",
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "TMPDIR": str(folder)},
    )
    return folder / f"{name}.mar"


OWN = "ray-own"  # Ray with a replica per archive (--models-per-replica 1)


def serve(kind: str, archives: list[Path], work: Path, settings: Settings):
    """A started engine of ``kind`` serving every archive, each answered once (``msnb_engine``'s: a smoke run's
    are the process-wide TorchServe and Ray, so its cold starts are deploys only, and no TorchServe starts here)."""
    if kind == OWN:
        from msnb.engines.ray.engine import LocalRay

        engine = LocalRay(models_per_replica=1).start()
    else:
        engine = msnb_engine(kind, work, settings).start()
    if engine.kind == "ray":
        from msnb.cli.serve_archives import deploy_archives

        with contextlib.redirect_stdout(io.StringIO()):
            deploy_archives(engine, archives)
    else:
        for path in archives:
            engine.register(path)
    for path in archives:
        engine.predict(path.stem, SAMPLE)
    return engine


def release(engine, archives: list[Path], settings: Settings) -> None:
    for path in archives if settings.smoke and engine.kind == "ray" else []:  # the smoke run's shared Ray stays
        engine.unregister(path.stem)
    stop_engine(engine, settings)


def cold_start(kind: str, archives: list[Path], work: Path, settings: Settings) -> tuple[float, float, int]:
    """(s to every first answer, PSS MiB of the serving tree then, its processes)."""
    start = time.perf_counter()
    engine = serve(kind, archives, work, settings)
    took = time.perf_counter() - start
    try:
        return (took, *pss(serving_tree(engine)))
    finally:
        release(engine, archives, settings)


def serving_tree(engine) -> list[psutil.Process]:
    """The processes that serve (not this one, which drives them): TorchServe's Java and its workers, or every
    process of the local Ray's temp root (its GCS, raylet, agents, Serve's controller, proxy, router and replicas),
    with the front; and each engine's watchdog."""
    from msnb.engines.watchdog import marked, process_tree

    if engine.kind == "ray":
        found = marked("RAY_TMPDIR", str(engine.root)) + process_tree(engine._ingress.pid)
    else:
        found = process_tree(engine.pid)
    helper = getattr(engine, "_watchdog", None)
    found += process_tree(helper.pid) if helper is not None else []
    return list({p.pid: p for p in found}.values())


def pss(procs: list[psutil.Process]) -> tuple[float, int]:
    """Summed proportional set size (a shared page divided among its sharers) in MiB, and how many processes."""
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_full_info().pss
    return total / 2**20, len(procs)


def run(settings: Settings) -> dict:
    work = settings.workdir / "ray_archives"
    many = settings.size(8, 8, 1)  # smoke: one archive, one Ray start (the shared one)
    archives = [build(work, f"tiny{i}") for i in range(many)]
    variants = {f"{kind} {n}": (kind, archives[:n]) for n in (1, many) for kind in ("torchserve", "ray")}
    if not settings.smoke:  # the smoke run's Ray is the shared process-wide one: no second start
        variants[f"{OWN} {many}"] = (OWN, archives)
    cold = interleave({k: lambda v=v: cold_start(*v, work, settings) for k, v in variants.items()}, settings.reps)
    engines = {kind: serve(kind, archives, work, settings) for kind in ("torchserve", "ray")}
    try:
        total = settings.size(2000, 400, CLIENTS)
        loads = interleave(
            {k: lambda e=e: _load(e, archives[0].stem, total) for k, e in engines.items()}, settings.reps
        )
    finally:
        for engine in engines.values():
            release(engine, archives, settings)
    result = report(cold, loads, many, settings)
    if not settings.smoke:  # a measured run is also appended to bench/RAY_ARCHIVES.md (the smoke run's mean nothing)
        append(result)
        plot(result)
    return result


def _load(engine, name: str, total: int) -> dict:
    url = f"{engine.inference_url}/predictions/{name}"
    return load(url, json.dumps(SAMPLE).encode(), total, CLIENTS, inference_headers(engine), wall_cap=120)


def report(cold: dict, loads: dict, many: int, settings: Settings) -> dict:
    rows = {
        f"cold start, {k.split()[1]} archive(s): {k.split()[0]} s": summary([t for t, _, _ in v])
        for k, v in cold.items()
    }
    for k, v in cold.items():
        rows[f"serving tree PSS, {k.split()[1]} archive(s): {k.split()[0]} MiB"] = summary([m for _, m, _ in v])
        rows[f"serving tree processes, {k.split()[1]} archive(s): {k.split()[0]}"] = summary([n for _, _, n in v])
    for kind, runs in loads.items():
        for metric in ("rps", "p50_ms", "p99_ms"):
            rows[f"tiny MLP, {CLIENTS} clients: {kind} {metric}"] = summary([r[metric] for r in runs])
    med = {k: v["median"] for k, v in rows.items()}

    def over(metric: str, n: int | None = None) -> float:
        key = f"cold start, {n} archive(s): {{}} s" if n else f"tiny MLP, {CLIENTS} clients: {{}} {metric}"
        return med[key.format("ray")] / med[key.format("torchserve")]

    ratios = {f"Ray / TorchServe: cold start, {n} archive(s)": over("", n) for n in sorted({1, many})}
    pss_key = f"serving tree PSS, {many} archive(s): {{}} MiB"
    ratios[f"Ray / TorchServe: serving tree PSS, {many} archive(s)"] = (
        med[pss_key.format("ray")] / med[pss_key.format("torchserve")]
    )
    if f"{OWN} {many}" in cold:  # before replica sets, in the same run
        ratios[f"Ray, a replica each / TorchServe: cold start, {many} archive(s)"] = (
            med[f"cold start, {many} archive(s): {OWN} s"] / med[f"cold start, {many} archive(s): torchserve s"]
        )
        ratios[f"Ray, a replica each / TorchServe: serving tree PSS, {many} archive(s)"] = (
            med[pss_key.format(OWN)] / med[pss_key.format("torchserve")]
        )
    ratios.update({"Ray / TorchServe: req/s": over("rps"), "Ray / TorchServe: p99": over("p99_ms")})
    return {
        "title": "TorchServe archives on Ray Serve (msnb serve --engine ray) beside plain TorchServe",
        "unit": "s / req/s / ms",
        "rows": rows,
        "ratios": ratios,
        "notes": f"{settings.mode}{settings.reps} interleaved run(s) each; archives made by torch-model-archiver "
        f"(a module-level tiny MLP 4-16-3, batchSize {BATCH}, maxBatchDelay {DELAY_MS} ms); cold start = engine "
        "start + every archive served + one answer from each (TorchServe registers one after another, Ray deploys "
        f"all in one Serve call, packed {DEFAULT_PACK} to a replica; {OWN}: a replica each); PSS of the serving tree "
        "(not the driving process) once every archive answered; "
        f"{CLIENTS} keep-alive clients on loopback on one archive while all are served, both engines with token "
        "auth on.",
    }


RESULTS = Path(__file__).parent / "RAY_ARCHIVES.md"
PLOT = Path(__file__).parent / "ray_archives.png"
DEFAULT_PACK = 8  # msnb.engines.ray.packing.DEFAULT_MODELS_PER_REPLICA


def plot(result: dict, path: Path = PLOT) -> None:
    """Bars: seconds to every first answer and the serving tree's PSS, for the most archives, on each engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = max(int(k.split(", ")[1].split()[0]) for k in result["rows"] if k.startswith("cold start"))
    kinds = [k for k in ("torchserve", "ray", OWN) if f"cold start, {many} archive(s): {k} s" in result["rows"]]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
    for ax, (row, unit) in zip(
        axes,
        (
            ("cold start, {n} archive(s): {k} s", "s to every first answer"),
            ("serving tree PSS, {n} archive(s): {k} MiB", "PSS of the serving tree, MiB"),
        ),
    ):
        ax.bar(kinds, [result["rows"][row.format(n=many, k=k)]["median"] for k in kinds], color=["C0", "C1", "C7"])
        ax.set_ylabel(unit)
        ax.set_title(f"{many} archives", fontsize=9)
    fig.suptitle("msnb serve --engine ray (packed; ray-own: a replica each) vs plain TorchServe", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class OneRun(Settings):
    """The quick sizes with one interleaved run of each variant (a busy machine's budget)."""

    @property
    def reps(self) -> int:
        return 1


def main() -> None:
    """`python -m bench.ray_archives`: one quick interleaved run, appended to bench/RAY_ARCHIVES.md."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="msnb-bench-") as tmp:
        run(OneRun(quick=True, workdir=Path(tmp)))


def append(result: dict) -> None:
    """The run's table, appended to bench/RAY_ARCHIVES.md under its date and load average."""
    from bench.report import append_run

    append_run(RESULTS, result, __doc__)


if __name__ == "__main__":
    main()
