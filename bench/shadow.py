"""`msnb shadow`'s cost to a client: the tiny MLP (a torch-model-archiver archive with a hand-written handler, on a
plain TorchServe: the primary) asked by 16 keep-alive clients straight, and through the shadow front, which answers
from the primary and mirrors every request to a second plain TorchServe serving the same archive (the candidate),
comparing each pair. Rounds interleaved; the front's own CPU per request measured from its process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench import models
from bench.anchors import ManualTorchServe, archive_cli
from bench.harness import Settings, interleave, load, summary

CLIENTS = 16
STRAIGHT, THROUGH = "straight to the primary (anchor)", "through the shadow front"
MSNB = str(Path(sys.executable).with_name("msnb"))


def run(settings: Settings) -> dict:
    work = settings.workdir / "shadow"
    primary, candidate = ManualTorchServe(work / "primary"), ManualTorchServe(work / "candidate")
    front = None
    try:
        mar = _archive(work)
        for server in (primary, candidate):
            shutil.copy(mar, server.store / mar.name)
            server.start()
            server.register(mar.name, batch_size=1)
        for proc in candidate.processes():  # it takes what the primary, the front and the clients leave idle
            proc.nice(19)
        front = Front(work, primary, candidate)
        runs = _measure(settings, primary, front)
        pairs = front.settled()
    finally:
        if front is not None:
            front.stop()
        primary.close()
        candidate.close()
    return report(runs, pairs, settings)


def _archive(work: Path) -> Path:
    """The tiny MLP as a team archives it: a hand-written handler and its state_dict, by torch-model-archiver."""
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "mlp.pt")
    handler = work / "mlp_handler.py"
    handler.write_text(models.handwritten_source(models.mlp_source(), models.SMALL))
    (work / "store").mkdir(exist_ok=True)
    archive_cli("mlp", handler, checkpoint, work / "store", work / "archiver.log")
    return work / "store" / "mlp.mar"


def _measure(settings: Settings, primary: ManualTorchServe, front: Front) -> dict[str, list[dict]]:
    body, headers = json.dumps(models.SAMPLE).encode(), primary.auth("inference")
    per_round = settings.size(3000, 600, 32) // settings.reps
    urls = {STRAIGHT: primary.url("inference", "predictions/mlp"), THROUGH: f"{front.url}/predictions/mlp"}

    def measure(name: str):
        def once() -> dict:
            cpu = front.cpu()
            result = load(urls[name], body, per_round, CLIENTS, headers, wall_cap=60)
            return {**result, "front_cpu_ms": (front.cpu() - cpu) * 1000 / max(1, result["requests"])}

        return once

    for name in urls:  # warm-up, not measured
        load(urls[name], body, 2 * CLIENTS, CLIENTS, headers, wall_cap=60)
    return interleave({name: measure(name) for name in urls}, settings.reps)


class Front:
    """`msnb shadow --primary URL --candidate URL` as a user starts it, found through its state file."""

    def __init__(self, work: Path, primary: ManualTorchServe, candidate: ManualTorchServe):
        env = {**os.environ, "MSNB_STATE_DIR": str(work / "state")}
        argv = [
            MSNB,
            "shadow",
            "--primary",
            f"http://127.0.0.1:{primary.ports['inference']}",
            "--primary-token-file",
            primary.workdir / "key_file.json",
            "--candidate",
            f"http://127.0.0.1:{candidate.ports['inference']}",
            "--candidate-token-file",
            candidate.workdir / "key_file.json",
            "--log",
            work / "differences.jsonl",
        ]
        with open(work / "shadow.out", "wb") as out:
            self.proc = subprocess.Popen([str(a) for a in argv], env=env, stdout=out, stderr=subprocess.STDOUT)
        state = work / "state" / "shadows" / f"{self.proc.pid}.json"
        deadline = time.monotonic() + 120
        while not state.exists() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not state.exists():
            self.stop()
            raise RuntimeError(f"msnb shadow did not start: {(work / 'shadow.out').read_text()[-2000:]}")
        self.record = json.loads(state.read_text())
        self.url = self.record["url"]

    def cpu(self) -> float:
        """The front process' CPU seconds so far (user and system)."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system

    def counts(self) -> dict:
        """What the front counted for the model (`msnb shadow status --json`'s row)."""
        import requests

        key = json.loads(Path(self.record["key_file"]).read_text())["management"]["key"]
        answer = requests.get(
            f"{self.record['metrics_url']}/shadow/status", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        return answer.json()["models"].get("mlp", {})

    def settled(self, bound_s: float = 60) -> dict:
        """The counts once every copy is judged, dropped or failed (a slow candidate answers the last ones late), or
        as they are after ``bound_s``."""
        deadline = time.monotonic() + bound_s
        while True:
            found = self.counts()
            done = sum(found.get(k, 0) for k in ("equal", "different", "candidate_errors", "dropped"))
            if done >= found.get("requests", 0) or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)


def report(runs: dict[str, list[dict]], pairs: dict, settings: Settings) -> dict:
    rows = {
        name: {metric: summary([r[metric] for r in results]) for metric in ("rps", "p50_ms", "p99_ms")}
        for name, results in runs.items()
    }
    rps = rows[THROUGH]["rps"]["median"] / rows[STRAIGHT]["rps"]["median"]
    p99 = rows[THROUGH]["p99_ms"]["median"] / rows[STRAIGHT]["p99_ms"]["median"]
    cpu = summary([r["front_cpu_ms"] for r in runs[THROUGH]])["median"]
    counted = {k: pairs.get(k) for k in ("requests", "equal", "different", "candidate_errors", "dropped")}
    return {
        "title": f"`msnb shadow`: a client through the shadow front vs straight to the primary (tiny MLP, {CLIENTS} clients)",
        "unit": "req/s, ms",
        "rows": rows,
        "ratios": {"front / straight req/s": rps, "front / straight p99": p99, "front CPU ms per request": cpu},
        "targets": [
            {"target": "through the shadow front >= 0.9x straight req/s", "value": f"{rps:.2f}x", "met": rps >= 0.9},
            {"target": "through the shadow front p99 <= 1.1x straight", "value": f"{p99:.2f}x", "met": p99 <= 1.1},
        ],
        "pairs": counted,
        "notes": f"{settings.mode}primary and candidate: plain TorchServe 0.12 (`torchserve --start`, token auth on, "
        "default logging), batch 1, the MLP 64-256-256-10 in a hand-written handler archived by torch-model-archiver; "
        "the candidate reniced to 19. Everything — both servers, the front, the 16 client threads — shares the "
        "machine's 2 cores, which other work loads too: the front's relay and the candidate's forward passes take "
        "cores the primary would otherwise have (on a real migration the candidate is a Ray cluster of its own). "
        f"Pairs the front counted over the whole run (warm-ups included): {counted}.",
    }
