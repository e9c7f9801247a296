"""Benchmark: the shapes a multi-model Ray replica could take, measured without Ray's cluster around them: eight
torch-model-archiver archives loaded by TorchServe's own loader (``LoadedModel``) and each answered once, in
(a) one process, each archive in a namespace of its own (the runtime's ray.isolation: what ray.multi_model does),
(b) one process that has imported torch, TorchServe and the replica's modules forking a child per archive (as
msnb's test fork server does: the children share those pages, which PSS counts once), and (c) a process per archive,
each importing everything itself (one Serve application per archive: the replicas before replica sets).
Time from the first process's start to every archive's first answer, and the PSS of the processes; interleaved."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

from bench.harness import Settings, interleave, summary
from bench.ray_archives import SAMPLE, build

COUNT = 8
READY = "ready"
# Each shape's process: load the folders given, answer each once, say READY, wait for stdin to close.
COMMON = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from msnb.templates.msnb_runtime.ray.app import LoadedModel  # ray.serve, starlette, ts: what a replica imports
    from msnb.templates.msnb_runtime.ray.isolation import Namespace
    from msnb.templates.msnb_runtime.ts.model_loader import enter
    import ts.model_loader  # TorchServe's loader too: a fork's children share it rather than each importing it

    SAMPLE = json.dumps({sample!r}).encode()

    def answered(model):
        status, _, body = model.answer([(False, SAMPLE, {{"content-type": "application/json"}})])[0]
        assert status == 200, body
""")
SHAPES = {
    "one process, a namespace each": COMMON
    + textwrap.dedent("""
        for folder in sys.argv[1:]:
            space = Namespace(Path(folder))
            with space.entered():
                model = LoadedModel(Path(folder))
            model.entry = space.wrap(model.entry)
            answered(model)
        print("ready", flush=True)
        sys.stdin.read()
    """),
    "a fork per archive": COMMON
    + textwrap.dedent("""
        import gc

        gc.freeze()  # the parent's objects out of the collector's reach: the children's collections dirty no page of them
        pipes = []
        for folder in sys.argv[1:]:
            done, told = os.pipe()
            stay, keep = os.pipe()
            if os.fork() == 0:
                for fd in [keep, *(k for _, k in pipes)]:  # only the parent holds them: its end is theirs
                    os.close(fd)
                answered(LoadedModel(enter(Path(folder))))
                os.write(told, b"1")
                os.read(stay, 1)  # until the parent goes
                os._exit(0)
            pipes.append((done, keep))
        for done, _ in pipes:
            os.read(done, 1)
        print("ready", flush=True)
        sys.stdin.read()
    """),
    "a process per archive": COMMON
    + textwrap.dedent("""
        answered(LoadedModel(enter(Path(sys.argv[1]))))
        print("ready", flush=True)
        sys.stdin.read()
    """),
}


def pss_mib(procs: list[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        for one in [proc, *proc.children(recursive=True)]:
            try:
                total += one.memory_full_info().pss
            except psutil.NoSuchProcess:
                pass
    return total / 2**20


def run_shape(shape: str, folders: list[Path], work: Path) -> tuple[float, float]:
    """(seconds to every first answer, PSS MiB of the processes) for one shape."""
    code = SHAPES[shape].format(sample=SAMPLE)
    groups = [[str(f)] for f in folders] if shape == "a process per archive" else [[str(f) for f in folders]]
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, *g], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=work
        )
        for g in groups
    ]
    try:
        for proc in procs:
            line = proc.stdout.readline().strip()
            if line != READY:
                raise RuntimeError(f"{shape}: {line!r}")
        took = time.perf_counter() - start
        return took, pss_mib([psutil.Process(p.pid) for p in procs])
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(60)


def run(settings: Settings) -> dict:
    from msnb.package.model_folder import ModelFolder

    work = settings.workdir / "replica_shapes"
    archives = [build(work / "mars", f"tiny{i}") for i in range(settings.size(COUNT, COUNT, 2))]
    (work / "folders").mkdir(parents=True, exist_ok=True)
    folders = [ModelFolder.open(a, work / "folders", set()).path for a in archives]
    runs = interleave({s: lambda s=s: run_shape(s, folders, work) for s in SHAPES}, settings.reps)
    rows = {}
    for shape, got in runs.items():
        rows[f"{shape}: s to every first answer"] = summary([t for t, _ in got])
        rows[f"{shape}: PSS MiB"] = summary([m for _, m in got])
    return {
        "title": "Shapes of a multi-model replica (no Ray cluster)",
        "unit": "s / MiB",
        "rows": rows,
        "notes": f"{settings.mode}{settings.reps} interleaved run(s); {len(folders)} tiny-MLP archives made by "
        "torch-model-archiver; every process imports the runtime's ray.app (Ray Serve, starlette, TorchServe, torch) as a "
        "replica does.",
    }


class OneRun(Settings):
    @property
    def reps(self) -> int:
        return 1


RESULTS = Path(__file__).parent / "REPLICA_SHAPES.md"


def main() -> None:
    """`python -m bench.replica_shapes`: one interleaved run, printed and appended to bench/REPLICA_SHAPES.md."""
    import json

    with tempfile.TemporaryDirectory(prefix="msnb-bench-") as tmp:
        result = run(OneRun(quick=True, workdir=Path(tmp)))
    print(json.dumps(result, indent=1))
    append(result)


def append(result: dict) -> None:
    """The run's table, appended to bench/REPLICA_SHAPES.md under its date and load average."""
    from bench.report import append_run

    append_run(RESULTS, result, __doc__)


if __name__ == "__main__":
    main()
