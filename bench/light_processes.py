"""Benchmark 11, light processes: the served tree's PSS process by process, and cold start to the first answer, of
msnb (``Session.serve``, as ``%ms_serve`` runs it) beside LitServe serving the same tiny model; and the wall time of
the ``msnb`` command's help, which imports neither IPython nor torch.

Skipped (reported as such) when litserve is not installed: it is an optional bench dependency (``msnb[bench]``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import torch

from bench import models
from bench.beside_litserve import LitServeProcess
from bench.harness import Settings, interleave, ratio, summary, timed
from msnb.engines.torchserve import LocalServer
from msnb.session.core import Session

TITLE = "11. Light processes: the served tree's PSS by process and cold start, beside LitServe 0.2.19"
LITSERVE = "LitServe (anchor)"
TINY = (models.SMALL, 1, 0)  # (init kwargs, batch size, max delay ms): LitServeProcess's model
ANSWERS = 20  # answers before the PSS sample: the tree has served, not only started
COMMAND = Path(sys.executable).parent / "msnb"  # the console script of this environment
Measured = tuple[float, int]  # (PSS MiB, processes) of one part of a served tree
HELP = {"msnb --help": ["--help"], "msnb export --help": ["export", "--help"]}


def run(settings: Settings) -> dict:
    if importlib.util.find_spec("litserve") is None:
        return {"title": TITLE, "skipped": "litserve is not installed (pip install 'msnb[bench]')", "rows": {}}
    load_start = [round(x, 1) for x in os.getloadavg()]
    work = settings.workdir / "light"
    work.mkdir(parents=True, exist_ok=True)
    ckpt = models.save_mlp_checkpoint(models.SMALL, work / "tiny.pt")
    reps = settings.size(settings.reps, 1)
    check = _checked(truth(ckpt))
    runs = interleave({"msnb": lambda: _msnb(work, ckpt, check), LITSERVE: lambda: _litserve(work, ckpt, check)}, reps)
    rows = {name: _rows(measured) for name, measured in runs.items()}
    helps = interleave({name: lambda argv=argv: _command(argv) for name, argv in HELP.items()}, settings.size(7, 2, 1))
    rows["the msnb command"] = {name: {"wall s": summary(values)} for name, values in helps.items()}
    return report(rows, settings, load_start)


def _msnb(work: Path, ckpt: Path, check: Callable[[dict], None]) -> tuple[float, dict[str, Measured]]:
    """A fresh Session serves the tiny model on its own TorchServe: (call -> first answer s, PSS by process)."""
    kwargs, batch, delay = TINY
    spec = models.mlp_spec("m", kwargs, ckpt, batch_size=batch, max_batch_delay=delay)
    session = Session(lambda engine, port: LocalServer(work / f"msnb-{time.monotonic_ns()}"))
    try:
        seconds = timed(lambda: (session.serve(spec), check(session.predict("m", models.SAMPLE))))
        for _ in range(ANSWERS):
            session.predict("m", models.SAMPLE)
        java = psutil.Process(session.server(create=False).pid)
        parts = {"frontend (Java)": [java], "worker(s)": java.children(recursive=True), "watchdog": _watchdogs(java)}
        return seconds, {part: measured(procs) for part, procs in parts.items()}
    finally:
        session.stop()


def _watchdogs(java: psutil.Process) -> list[psutil.Process]:
    """This process's watchdog of ``java`` (``python -m msnb.engines.watchdog PID``)."""
    found = []
    for child in psutil.Process().children():
        argv = _argv(child)
        if "msnb.engines.watchdog" in argv and str(java.pid) in argv:
            found.append(child)
    if len(found) != 1:
        raise RuntimeError(f"expected one watchdog of pid {java.pid}, found {len(found)}")
    return found


def _litserve(work: Path, ckpt: Path, check: Callable[[dict], None]) -> tuple[float, dict[str, Measured]]:
    """LitServe's own process serves the same cell: (start -> first answer s, PSS by process)."""
    lit = LitServeProcess(work, ckpt, TINY)
    try:
        seconds = timed(lambda: (lit.start(), check(lit.predict())))
        for _ in range(ANSWERS):
            lit.predict()
        under = lit.proc.children(recursive=True)
        spawned = [p for p in under if "spawn_main" in " ".join(_argv(p))]  # multiprocessing's spawned worker
        parts = {
            "API server": [lit.proc],
            "inference worker(s)": spawned,
            "HTTP server and multiprocessing helpers": [p for p in under if p not in spawned],
        }
        return seconds, {part: measured(procs) for part, procs in parts.items()}
    finally:
        lit.stop()


def _argv(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.NoSuchProcess:
        return []


def measured(procs: list[psutil.Process]) -> Measured:
    """Summed proportional set size (shared pages divided among their sharers) of ``procs`` in MiB, and how many."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20, len(procs)


def truth(ckpt: Path) -> dict:
    """The cell's answer to the sample computed with plain torch on the checkpoint: what both servers must say."""
    model = models.mlp_model(models.SMALL, ckpt)
    with torch.inference_mode():
        output = model(torch.tensor(models.SAMPLE["x"], dtype=torch.float32))
    return {"label": int(output.argmax()), "revision": 0}


def _checked(expected: dict) -> Callable[[dict], None]:
    def check(answer: dict) -> None:
        if answer != expected:  # what is timed answered right: a check, not a timed assertion
            raise RuntimeError(f"expected {expected}, got {answer}")

    return check


def _command(argv: list[str]) -> float:
    """Wall time of the console script (a fresh interpreter) printing its help."""
    return timed(lambda: subprocess.run([str(COMMAND), *argv], capture_output=True, check=True))


def _rows(runs: list[tuple[float, dict[str, Measured]]]) -> dict:
    rows: dict = {"cold start -> first answer s": summary([seconds for seconds, _ in runs])}
    for part in runs[0][1]:
        rows[part] = {"PSS MiB": summary([parts[part][0] for _, parts in runs]), "processes": runs[-1][1][part][1]}
    rows["whole tree"] = {"PSS MiB": summary([sum(pss for pss, _ in parts.values()) for _, parts in runs])}
    return rows


def report(rows: dict, settings: Settings, load_start: list[float]) -> dict:
    m, lit = rows["msnb"], rows[LITSERVE]
    tree = ratio(m["whole tree"]["PSS MiB"], lit["whole tree"]["PSS MiB"])
    cold = ratio(m["cold start -> first answer s"], lit["cold start -> first answer s"])
    watchdog = m["watchdog"]["PSS MiB"]["median"]
    helps = {name: r["wall s"]["median"] for name, r in rows["the msnb command"].items()}
    load_end = [round(x, 1) for x in os.getloadavg()]
    counts = "; ".join(
        f"{name}: " + ", ".join(f"{part} {row['processes']}" for part, row in rows[name].items() if "processes" in row)
        for name in ("msnb", LITSERVE)
    )
    return {
        "title": TITLE,
        "unit": "see each row",
        "rows": rows,
        "ratios": {"msnb / LitServe: whole tree PSS": tree, "msnb / LitServe: cold start -> first answer": cold},
        "load_average": {"start": load_start, "end": load_end},
        "targets": [
            {"target": "served tree PSS <= 0.8x LitServe's (tiny model)", "value": f"{tree:.2f}x", "met": tree <= 0.8},
            {"target": "cold start -> first answer <= 0.8x LitServe's", "value": f"{cold:.2f}x", "met": cold <= 0.8},
            {"target": "watchdog PSS <= 25 MiB", "value": f"{watchdog:.1f} MiB", "met": watchdog <= 25},
            *[
                {"target": f"{name} <= 0.3 s", "value": f"{seconds:.2f} s", "met": seconds <= 0.3}
                for name, seconds in helps.items()
            ],
        ],
        "notes": f"{'quick mode: ' if settings.quick else ''}load average {load_start} -> {load_end} "
        f"({os.cpu_count()} cores, shared). Tiny MLP 64-256-256-10, batch 1, one worker each, loopback. msnb: a "
        "fresh Session.serve (as %ms_serve: build the dev model folder, start TorchServe with token auth and its "
        "watchdog, register) from the call to the first answer; LitServe: its process started to the first answer "
        f"(/health polled every 20 ms). PSS sampled after {ANSWERS} more answers, idle: msnb's tree is the Java "
        "frontend, its worker(s) and the watchdog (the notebook's kernel is not counted); LitServe's is its API "
        "server and every process under it (inference worker, multiprocessing helpers). PSS divides a shared page "
        f"among all its sharers on the machine, so other servers running beside lower it a little. Processes: {counts}.",
    }
