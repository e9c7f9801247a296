"""Benchmark: LitServe's own streaming speed test, side by side. One request streams 10,000 JSON lines; the client
is the test's (requests, ``iter_lines``) and measures time to the first token and tokens per second. LitServe runs
the test's own server; msnb serves the same stream from a handler cell on TorchServe and on Ray Serve. LitServe's
CI asserts < 5 ms to the first token and >= 3,600 tokens/s (its comment: "3600 on GitHub CI")."""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

from bench.beside_litserve import LitServeProcess
from bench.harness import Settings, inference_headers, interleave_servers, load_average, msnb_serving, summary
from bench.stream_speed_cell import CELL, TOKENS

NAME = "streamspeed"
LITSERVE = "LitServe (anchor)"
TTFT_GOAL_MS, SPEED_GOAL = 5.0, 3600  # LitServe's CI assertions (tests/perf_test/stream/stream_speed/benchmark.py)


class SpeedApp(LitServeProcess):
    """LitServe's speed test server (``bench.litserve_speed_app``) on a free loopback port."""

    def __init__(self, work: Path):
        super().__init__(work, Path(), ((), 1, 0))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bench.litserve_speed_app", str(self.port)]


def speed_test(session: requests.Session, url: str, headers: dict) -> tuple[float, float]:
    """LitServe's client: one streamed request; ms to its first non-empty line, and lines per second."""
    start = time.perf_counter()
    resp = session.post(url, stream=True, json={"input": 1}, headers=headers, timeout=120)
    tokens, first = 0, None
    for line in resp.iter_lines():
        if not line:
            continue
        if first is None:
            first = time.perf_counter() - start
        tokens += 1
    end = time.perf_counter()
    resp.raise_for_status()
    if tokens != TOKENS:
        raise RuntimeError(f"{url} streamed {tokens} lines, not {TOKENS}")
    return first * 1000, tokens / (end - start)


def run(settings: Settings) -> dict:
    work = settings.workdir / "stream_speed"
    work.mkdir(parents=True, exist_ok=True)

    def start(serve: Callable[[], tuple[str, dict, Callable[[], None]]]) -> Callable[[], tuple]:
        def started() -> tuple[Callable[[], tuple[float, float]], Callable[[], None]]:
            url, headers, stop = serve()
            session = requests.Session()  # one per server, kept alive, as LitServe's test does
            return lambda: speed_test(session, url, headers), stop

        return started

    starts = {"TorchServe (msnb)": start(lambda: _msnb("torchserve", work, settings))}
    if importlib.util.find_spec("ray") is not None:  # the optional engine and anchor: measured when installed
        starts["Ray Serve (msnb)"] = start(lambda: _msnb("ray", work, settings))
    if importlib.util.find_spec("litserve") is not None:
        starts[LITSERVE] = start(lambda: _litserve(work))
    load = [load_average()]
    runs = interleave_servers(starts, settings.size(10, 3, 1))
    load.append(load_average())
    rows = {n: {"first token ms": [r[0] for r in rs], "tokens per s": [r[1] for r in rs]} for n, rs in runs.items()}
    return report(rows, settings, load)


def _msnb(kind: str, work: Path, settings: Settings) -> tuple[str, dict, Callable[[], None]]:
    engine, stop = msnb_serving(kind, work, settings, NAME, CELL)
    return f"{engine.inference_url}/predictions/{NAME}", inference_headers(engine), stop


def _litserve(work: Path) -> tuple[str, dict, Callable[[], None]]:
    app = SpeedApp(work).start()
    return f"{app.url}/predict", {}, app.stop


def report(rows: dict, settings: Settings, load: list[str]) -> dict:
    ratios, targets = {}, []
    lit = rows.get(LITSERVE)
    for name, row in rows.items():
        first, speed = statistics.median(row["first token ms"]), statistics.median(row["tokens per s"])
        if name == LITSERVE:
            continue
        targets += [
            {
                "target": f"{name}: first token < {TTFT_GOAL_MS:g} ms (LitServe's CI)",
                "value": f"{first:.1f} ms",
                "met": first < TTFT_GOAL_MS,
            },
            {
                "target": f"{name}: >= {SPEED_GOAL} tokens/s (LitServe's CI)",
                "value": f"{speed:.0f}/s",
                "met": speed >= SPEED_GOAL,
            },
        ]
        if lit is not None:
            lit_first, lit_speed = statistics.median(lit["first token ms"]), statistics.median(lit["tokens per s"])
            ratios[f"{name}: first token / LitServe's"] = first / lit_first
            ratios[f"{name}: tokens per s / LitServe's"] = speed / lit_speed
            targets.append(
                {
                    "target": f"{name}: beats LitServe side by side (first token and tokens/s)",
                    "value": f"{first / lit_first:.2f}x first token, {speed / lit_speed:.2f}x tokens/s",
                    "met": first <= lit_first and speed >= lit_speed,
                }
            )
    return {
        "title": "Streaming speed: LitServe's own speed test, msnb on TorchServe and Ray Serve beside LitServe",
        "unit": "ms, tokens/s",
        "rows": {name: {k: summary(v) for k, v in row.items()} for name, row in rows.items()},
        "ratios": ratios,
        "targets": targets,
        "notes": f"{settings.mode}one request streams {TOKENS:,} JSON lines "
        '(`{"output": i}`); the client is LitServe\'s speed test (a kept-alive `requests.Session`, `iter_lines`), '
        "run against each server in turn, rounds interleaved, after one warm-up each. LitServe runs its test's own "
        "server (generator `predict` + `encode_response`, `stream=True`); msnb serves the cell in "
        "`bench/stream_speed_cell.py` (a generator `inference`, one JSON chunk per step) as `%ms_serve` does, token "
        f"authorisation on. Loopback, batch size 1, every server up during every round. Before the rounds: "
        f"{load[0]}; after: {load[1]}.",
    }
