"""Benchmark 9, msnb beside LitServe 0.2.19: edit -> new answer, cold start, tiny and batched load, PSS.

Skipped (reported as such) when litserve is not installed: it is an optional bench dependency.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

from bench import models
from bench.harness import Settings, interleave, load, ratio, summary, timed, wait_gone
from msnb.engines.torchserve import LocalServer
from msnb.engines.torchserve.config import choose_ports
from msnb.session.reload import Reloads

ROOT = Path(__file__).resolve().parent.parent
TINY, BATCHED = (models.SMALL, 1, 0), (models.WIDE, 16, 5)  # (init kwargs, batch size, max delay ms)
LITSERVE = "LitServe (anchor)"


class LitServeProcess:
    """``python -m bench.litserve_app`` on a free loopback port; ready when /health answers."""

    def __init__(self, work: Path, checkpoint: Path, model: tuple, revision: int = 0):
        self.work, self.checkpoint, self.model, self.revision = work, checkpoint, model, revision
        self.proc: psutil.Process | None = None
        self.port = 0

    def command(self) -> list[str]:
        """The app's command line (the port is chosen by ``start``)."""
        kwargs, batch, delay_ms = self.model
        args = [self.port, self.checkpoint, kwargs["width"], kwargs["depth"], self.revision, batch, delay_ms / 1000]
        return [sys.executable, "-m", "bench.litserve_app", *map(str, args)]

    def start(self) -> "LitServeProcess":
        self.port = choose_ports()["inference"]
        with open(self.work / "litserve.log", "ab") as out:
            popen = subprocess.Popen(
                self.command(),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.proc = psutil.Process(popen.pid)
        deadline = time.monotonic() + 60
        while not self._healthy():
            if time.monotonic() > deadline or popen.poll() is not None:
                raise RuntimeError(f"LitServe did not start: {(self.work / 'litserve.log').read_text()[-2000:]}")
            time.sleep(0.02)
        return self

    def _healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def predict(self) -> dict:
        return requests.post(f"{self.url}/predict", json=models.SAMPLE, timeout=30).json()

    def stop(self) -> None:
        if self.proc is None:
            return
        tree = [self.proc, *self.proc.children(recursive=True)]
        for proc in tree:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        wait_gone(tree)
        self.proc = None


class MsnbServer:
    """A LocalServer serving one model the way %ms_serve does (the dev entry; edits reload)."""

    def __init__(self, work: Path, checkpoint: Path, model: tuple):
        self.server, self.reloads, self.checkpoint, self.model = LocalServer(work), Reloads(), checkpoint, model

    def serve(self, revision: int = 0) -> None:
        kwargs, batch, delay = self.model
        spec = models.mlp_spec("m", kwargs, self.checkpoint, revision, batch_size=batch, max_batch_delay=delay)
        self.reloads.serve(self.server.start(), spec)

    def predict(self) -> dict:
        return self.server.predict("m", models.SAMPLE)

    @property
    def url(self) -> str:
        return f"{self.server.inference_url}/predictions/m"

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {json.loads(self.server.layout.key_file.read_text())['inference']['key']}"}


def pss_mib(root: psutil.Process) -> float:
    """Proportional set size of a process and its descendants (shared pages counted once overall)."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def run(settings: Settings) -> dict:
    if importlib.util.find_spec("litserve") is None:
        return {"title": TITLE, "skipped": "litserve is not installed (pip install 'msnb[bench]')", "rows": {}}
    work = settings.workdir / "litserve"
    work.mkdir(parents=True, exist_ok=True)
    tiny_ckpt = models.save_mlp_checkpoint(models.SMALL, work / "tiny.pt")
    wide_ckpt = models.save_mlp_checkpoint(models.WIDE, work / "wide.pt")
    rows: dict[str, dict] = {"msnb": {}, LITSERVE: {}}
    _edit_and_cold(settings, work, tiny_ckpt, rows)
    _under_load(settings, work, tiny_ckpt, TINY, "tiny", rows, pss=True)
    _under_load(settings, work, wide_ckpt, BATCHED, "batched", rows)
    return report(rows, settings)


def _edit_and_cold(settings: Settings, work: Path, ckpt: Path, rows: dict) -> None:
    msnb, lit = MsnbServer(work / "edit-msnb", ckpt, TINY), LitServeProcess(work, ckpt, TINY)
    revision = iter(range(1, 1000))

    def msnb_edit():
        r = next(revision)
        return timed(lambda: (msnb.serve(r), _check(msnb.predict(), r)))

    def lit_edit():
        r = next(revision)
        lit.revision = r
        return timed(lambda: (lit.stop(), lit.start(), _check(lit.predict(), r)))

    try:
        started = {"msnb": timed(lambda: msnb.serve(0)), LITSERVE: timed(lit.start)}
        edits = interleave({"msnb": msnb_edit, LITSERVE: lit_edit}, settings.reps)
    finally:
        msnb.server.stop()
        lit.stop()
    if settings.smoke:  # the edit servers' own starts stand for the cold starts (two servers fewer)
        colds = {name: [seconds] for name, seconds in started.items()}
    else:
        colds = interleave(
            {"msnb": lambda: _msnb_cold(work, ckpt), LITSERVE: lambda: _lit_cold(work, ckpt)}, settings.reps
        )
    for name in rows:
        rows[name]["edit -> new answer s"] = summary(edits[name])
        rows[name]["cold start -> first answer s"] = summary(colds[name])


def _msnb_cold(work: Path, ckpt: Path) -> float:
    msnb = MsnbServer(work / f"cold-{time.monotonic_ns()}", ckpt, TINY)
    try:
        return timed(lambda: (msnb.serve(0), msnb.predict()))
    finally:
        msnb.server.stop()


def _lit_cold(work: Path, ckpt: Path) -> float:
    lit = LitServeProcess(work, ckpt, TINY)
    try:
        return timed(lambda: (lit.start(), lit.predict()))
    finally:
        lit.stop()


def _under_load(settings: Settings, work: Path, ckpt: Path, model: tuple, label: str, rows: dict, pss=False) -> None:
    msnb, lit = MsnbServer(work / f"load-{label}", ckpt, model), LitServeProcess(work, ckpt, model)
    total = settings.size(2000, 400, 64) // (2 if model is BATCHED else 1)
    body = json.dumps(models.SAMPLE).encode()
    try:
        msnb.serve(0)
        lit.start()
        msnb.predict(), lit.predict()
        roots = {"msnb": psutil.Process(msnb.server.pid), LITSERVE: lit.proc}
        before = {name: pss_mib(root) for name, root in roots.items()}
        variants = {
            "msnb": lambda: load(msnb.url, body, total, 16, msnb.headers, wall_cap=60),
            LITSERVE: lambda: load(f"{lit.url}/predict", body, total, 16, {}, wall_cap=60),
        }
        for run_once in variants.values():  # warm-up, not measured
            run_once()
        runs = interleave(variants, settings.reps)
        after = {name: pss_mib(root) for name, root in roots.items()}
    finally:
        msnb.server.stop()
        lit.stop()
    for name, results in runs.items():
        for metric in ("rps", "p50_ms", "p99_ms"):
            rows[name][f"{label} {metric.replace('_', ' ')}"] = summary([r[metric] for r in results])
        rows[name][f"{label} errors"] = sum(r["errors"] for r in results)
        if pss:
            rows[name]["PSS after load MiB"] = summary([after[name]])
            rows[name]["PSS before load MiB"] = summary([before[name]])


def _check(answer: dict, revision: int) -> None:
    if answer.get("revision") != revision:  # a correctness check of what is timed, not a timed assertion
        raise RuntimeError(f"expected the answer of revision {revision}, got {answer}")


TITLE = "9. msnb beside LitServe 0.2.19 (same cell, same client)"


def report(rows: dict, settings: Settings) -> dict:
    m, lit = rows["msnb"], rows[LITSERVE]
    ratios = {f"msnb / LitServe: {k}": m[k]["median"] / lit[k]["median"] for k in m if isinstance(m[k], dict)}
    edit, p99, rps = (
        m["edit -> new answer s"],
        ratios["msnb / LitServe: tiny p99 ms"],
        ratios["msnb / LitServe: tiny rps"],
    )
    pss = ratios["msnb / LitServe: PSS after load MiB"]
    return {
        "title": TITLE,
        "unit": "see each row",
        "rows": rows,
        "ratios": ratios,
        "targets": [
            {
                "target": "edit -> new answer <= 0.3 s median",
                "value": f"{edit['median']:.2f} s",
                "met": edit["median"] <= 0.3,
            },
            {
                "target": "edit -> new answer <= 0.1x LitServe's restart",
                "value": f"{ratio(edit, lit['edit -> new answer s']):.2f}x",
                "met": ratio(edit, lit["edit -> new answer s"]) <= 0.1,
            },
            {"target": "tiny p99 <= 1.0x LitServe (16 clients)", "value": f"{p99:.2f}x", "met": p99 <= 1.0},
            {"target": "tiny req/s >= 1.0x LitServe (16 clients)", "value": f"{rps:.2f}x", "met": rps >= 1.0},
            {"target": "server PSS after load <= LitServe's", "value": f"{pss:.2f}x", "met": pss <= 1.0},
        ],
        "notes": f"{'quick mode: ' if settings.quick else ''}one process per server, one worker each, loopback, "
        "16 keep-alive client threads sharing the cores. msnb serves the way %ms_serve does (dev entry, token "
        "auth on); an edit reloads inside the live worker. LitServe has no reload: an edit is stop + start. "
        "Tiny: MLP 64-256-256-10, batch 1; batched: MLP 64-2048x3-10, batch 16 / 5 ms (LitServe: "
        "max_batch_size 16, batch_timeout 5 ms). PSS: the server's process tree (Java + worker; LitServe's "
        "API server + inference worker), one sample before and after the tiny load.",
    }
