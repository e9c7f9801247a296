"""Benchmark: time to first chunk and time per chunk of a generator handler streamed by msnb on TorchServe and on
Ray Serve, beside a plain LitServe streaming API: same model, same prompt, same client (requests, one stream at a
time); against the model's own compute measured in-process and one HTTP round trip to each server."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests
import torch

from bench import stream_model
from bench.harness import Settings, inference_headers, msnb_engine, stop_engine, summary, timed, wait_gone
from msnb.engines.torchserve.config import choose_ports
from msnb.session.deployment import deploy
from msnb.spec import spec_from_source

ROOT = Path(__file__).resolve().parent.parent
NAME = "streambench"
LITSERVE = "LitServe (anchor)"
FIRST_CHUNK_GOAL, OVERHEAD_GOAL_MS = 1.2, 2.0  # the goals


def run(settings: Settings) -> dict:
    work = settings.workdir / "streaming"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = stream_model.save_checkpoint(work / "lm.pt")
    rounds = settings.size(10, 3, 1)
    compute = Compute(checkpoint)
    results = {"TorchServe (msnb)": _msnb("torchserve", checkpoint, work, rounds, compute, settings)}
    if importlib.util.find_spec("ray") is not None:  # the optional engines and anchor: measured when installed
        results["Ray Serve (msnb)"] = _msnb("ray", checkpoint, work, rounds, compute, settings)
    if importlib.util.find_spec("litserve") is not None:
        results[LITSERVE] = _litserve(checkpoint, work, rounds, compute)
    return report(results, settings)


class Compute:
    """The model's own first step (one forward over the prompt) and mean step time, in this process, in ms:
    measured beside each stream (the shared machine's load changes from minute to minute)."""

    def __init__(self, checkpoint: Path):
        self.cell = stream_model.cell()
        self.model = self.cell["init_function"]()  # one thread, as on the servers
        self.model.load_state_dict(torch.load(checkpoint, weights_only=True))
        self.model.eval()
        self.ids = self.cell["preprocess"](stream_model.PROMPT)[None]

    def measure(self) -> tuple[float, float]:
        with torch.inference_mode():
            first = timed(lambda: self.model(self.ids)) * 1000
            whole = timed(lambda: list(self.cell["inference"](self.model, self.ids))) * 1000
        return first, whole / stream_model.STEPS


def stream_once(url: str, headers: dict) -> tuple[float, float]:
    """One streamed answer: ms to its first piece, and ms per chunk between the first and the last piece."""
    body = json.dumps(stream_model.PROMPT).encode()
    start = time.perf_counter()
    with requests.post(
        url, data=body, headers={"Content-Type": "application/json", **headers}, stream=True, timeout=120
    ) as resp:
        resp.raise_for_status()
        arrived = [time.perf_counter() for _ in resp.iter_content(None)]
    return (arrived[0] - start) * 1000, (arrived[-1] - arrived[0]) / (stream_model.STEPS - 1) * 1000


def _measure(predict_url: str, ping_url: str, headers: dict, rounds: int, compute: Compute) -> dict[str, list]:
    """Streams, round trips and the model's in-process compute, interleaved round by round."""
    for _ in range(2):  # warm-up
        stream_once(predict_url, headers)
        compute.measure()
    rows: dict[str, list[float]] = {k: [] for k in ("first chunk ms", "per chunk ms", "round trip ms")}
    rows.update({"model first step ms": [], "model step ms": []})
    for _ in range(rounds):
        first_chunk, per_chunk = stream_once(predict_url, headers)
        trip = timed(lambda: requests.get(ping_url, headers=headers, timeout=10).raise_for_status()) * 1000
        first_step, step = compute.measure()
        for key, value in zip(rows, (first_chunk, per_chunk, trip, first_step, step)):
            rows[key].append(value)
    return rows


def _msnb(
    kind: str, checkpoint: Path, work: Path, rounds: int, compute: Compute, settings: Settings
) -> dict[str, list[float]]:
    engine = msnb_engine(kind, work, settings)
    try:
        engine.start()
        deploy(engine, spec_from_source(NAME, stream_model.CELL, checkpoint=str(checkpoint)))
        url = engine.inference_url
        return _measure(f"{url}/predictions/{NAME}", f"{url}/ping", inference_headers(engine), rounds, compute)
    finally:
        stop_engine(engine, settings)


def _litserve(checkpoint: Path, work: Path, rounds: int, compute: Compute) -> dict[str, list[float]]:
    port = choose_ports()["inference"]
    with open(work / "litserve.log", "ab") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "bench.litserve_stream_app", str(port), str(checkpoint)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc = psutil.Process(popen.pid)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while not _healthy(f"{url}/health"):
            if time.monotonic() > deadline or popen.poll() is not None:
                raise RuntimeError(f"LitServe did not start: {(work / 'litserve.log').read_text()[-2000:]}")
            time.sleep(0.05)
        return _measure(f"{url}/predict", f"{url}/health", {}, rounds, compute)
    finally:
        tree = [proc, *proc.children(recursive=True)]
        for child in tree:
            try:
                child.terminate()
            except psutil.NoSuchProcess:
                pass
        wait_gone(tree)


def _healthy(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def report(results: dict, settings: Settings) -> dict:
    ratios, targets = {}, []
    for name, row in results.items():
        first, step = statistics.median(row["model first step ms"]), statistics.median(row["model step ms"])
        budget = first + statistics.median(row["round trip ms"])
        ratios[f"{name}: first chunk / (first step + round trip)"] = statistics.median(row["first chunk ms"]) / budget
        overhead = statistics.median(row["per chunk ms"]) - step
        ratios[f"{name}: per-chunk overhead ms (per chunk - step)"] = overhead
        if name != LITSERVE:
            ratio = ratios[f"{name}: first chunk / (first step + round trip)"]
            targets += [
                {
                    "target": f"{name}: first chunk <= {FIRST_CHUNK_GOAL}x (first step + round trip)",
                    "value": f"{ratio:.2f}x",
                    "met": ratio <= FIRST_CHUNK_GOAL,
                },
                {
                    "target": f"{name}: per-chunk overhead <= {OVERHEAD_GOAL_MS} ms",
                    "value": f"{overhead:.2f} ms",
                    "met": overhead <= OVERHEAD_GOAL_MS,
                },
            ]
    rows = {name: {k: summary(v) for k, v in row.items()} for name, row in results.items()}
    return {
        "title": "Streaming: time to first chunk and per chunk, msnb on TorchServe and Ray Serve beside LitServe",
        "unit": "ms",
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
        "notes": f"{settings.mode}a character GRU LM (hidden {stream_model.HIDDEN}), "
        f"{len(stream_model.PROMPT)}-character prompt, {stream_model.STEPS} greedy steps, one chunk per step (a "
        "generator `inference`; LitServe: generator predict/encode_response); one stream at a time from `requests` "
        "(iter_content) on loopback; batch size 1. Round trip: the server's health endpoint (TorchServe /ping with "
        "its token, the Ray router's /ping, LitServe /health). The model runs on one thread everywhere; its own "
        "compute (model first step, model step) is measured in the client's process after each stream, so each "
        "ratio compares figures taken in the same minute of a shared, loaded machine.",
    }
