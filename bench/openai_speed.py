"""Benchmark: OpenAI's API, streamed, beside LitServe's OpenAISpec. One chat completion with ``stream=True`` streams
TOKENS text pieces; the official ``openai`` client measures the time to the first content delta and the pieces per
second. msnb serves a handler cell (bench/openai_speed_cell.py) at ``server.openai_base_url`` on TorchServe (msnb's
front) and on Ray Serve (the router); LitServe 0.2.19 serves the same generator with ``OpenAISpec``."""

from __future__ import annotations

import importlib.util
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.beside_litserve import LitServeProcess
from bench.harness import Settings, inference_headers, interleave_servers, load_average, msnb_serving, summary
from bench.openai_speed_cell import CELL, TOKENS

NAME = "openaispeed"
LITSERVE = "LitServe OpenAISpec (anchor)"
MESSAGES = [{"role": "user", "content": "count"}]
# The goal compares medians, and single first tokens spread from 4 to 200 ms on a shared machine while the engines'
# medians lie within a millisecond of each other: twenty rounds even in a quick run (each costs about a second per
# server; starting the servers, Ray's above all, takes the rest), forty in the full run.
ROUNDS_QUICK, ROUNDS_FULL = 20, 40


class OpenAIApp(LitServeProcess):
    """LitServe's OpenAISpec server (``bench.litserve_openai_app``) on a free loopback port."""

    def __init__(self, work: Path):
        super().__init__(work, Path(), ((), 1, 0))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bench.litserve_openai_app", str(self.port)]


def speed_test(client, model: str) -> tuple[float, float]:
    """One streamed chat completion: ms to its first content delta, and content deltas per second."""
    start = time.perf_counter()
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    tokens, first = 0, None
    for chunk in stream:
        if not chunk.choices or not chunk.choices[0].delta.content:
            continue
        if first is None:
            first = time.perf_counter() - start
        tokens += 1
    elapsed = time.perf_counter() - start
    if tokens != TOKENS:
        raise RuntimeError(f"{model} streamed {tokens} content deltas, not {TOKENS}")
    return first * 1000, tokens / elapsed


_CLIENTS: dict[str, object] = {}  # in the client's process: one per server, kept alive


def client_speed_test(base_url: str, key: str, model: str) -> tuple[float, float]:
    """``speed_test`` in the client's own process, with that server's kept client."""
    from openai import OpenAI

    if base_url not in _CLIENTS:
        _CLIENTS[base_url] = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120)
    return speed_test(_CLIENTS[base_url], model)


def run(settings: Settings) -> dict:
    work = settings.workdir / "openai_speed"
    work.mkdir(parents=True, exist_ok=True)
    # The client runs in a process of its own, as an application calling the API does: in this one it would share
    # the GIL with msnb's TorchServe front (a thread of the process that owns the server) and slow both.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as client:

        def start(serve: Callable[[], tuple[str, str, Callable[[], None]]], model: str) -> Callable[[], tuple]:
            def started() -> tuple[Callable[[], tuple[float, float]], Callable[[], None]]:
                base_url, key, stop = serve()
                return lambda: client.submit(client_speed_test, base_url, key, model).result(), stop

            return started

        return _rounds(start, work, settings)


def _rounds(start: Callable, work: Path, settings: Settings) -> dict:
    """Start each server (``start`` wraps its serve call into the harness's start), measure, report."""
    starts = {"TorchServe (msnb)": start(lambda: _msnb("torchserve", work, settings), NAME)}
    if importlib.util.find_spec("ray") is not None and not settings.smoke:  # the smoke run: CI time, one engine
        starts["Ray Serve (msnb)"] = start(lambda: _msnb("ray", work, settings), NAME)
    if importlib.util.find_spec("litserve") is not None:
        starts[LITSERVE] = start(lambda: _litserve(work), "lit")
    load = [load_average()]
    runs = interleave_servers(starts, settings.size(ROUNDS_FULL, ROUNDS_QUICK, 1))
    load.append(load_average())
    rows = {n: {"first token ms": [r[0] for r in rs], "tokens per s": [r[1] for r in rs]} for n, rs in runs.items()}
    return report(rows, settings, load)


def _msnb(kind: str, work: Path, settings: Settings) -> tuple[str, str, Callable[[], None]]:
    engine, stop = msnb_serving(kind, work, settings, NAME, CELL)
    key = inference_headers(engine).get("Authorization", "Bearer none").split()[1]
    return engine.openai_base_url, key, stop


def _litserve(work: Path) -> tuple[str, str, Callable[[], None]]:
    app = OpenAIApp(work).start()
    return f"{app.url}/v1", "none", app.stop


def report(rows: dict, settings: Settings, load: list[str]) -> dict:
    ratios, targets = {}, []
    lit = rows.get(LITSERVE)
    for name, row in rows.items():
        if name == LITSERVE or lit is None:
            continue
        first, speed = statistics.median(row["first token ms"]), statistics.median(row["tokens per s"])
        lit_first, lit_speed = statistics.median(lit["first token ms"]), statistics.median(lit["tokens per s"])
        ratios[f"{name}: first token / LitServe's"] = first / lit_first
        ratios[f"{name}: tokens per s / LitServe's"] = speed / lit_speed
        targets += [
            {
                "target": f"{name}: first token no later than LitServe's",
                "value": f"{first:.1f} vs {lit_first:.1f} ms",
                "met": first <= lit_first,
            },
            {
                "target": f"{name}: at least LitServe's tokens/s",
                "value": f"{speed:.0f} vs {lit_speed:.0f}/s",
                "met": speed >= lit_speed,
            },
        ]
    return {
        "title": "OpenAI's API streamed: msnb on TorchServe and Ray Serve beside LitServe's OpenAISpec",
        "unit": "ms, tokens/s",
        "rows": {name: {k: summary(v) for k, v in row.items()} for name, row in rows.items()},
        "ratios": ratios,
        "targets": targets,
        "notes": f"{settings.mode}one chat completion with `stream=True` streams {TOKENS:,} text pieces; the client "
        "is the official `openai` package in a process of its own (one client per server, kept alive), run "
        "against each server in turn, rounds interleaved, after one warm-up each. msnb serves "
        "`bench/openai_speed_cell.py` (a generator `inference`, one str piece per step) at "
        "`server.openai_base_url`, token authorisation on; LitServe 0.2.19 serves the same pieces from a generator "
        "`predict` with `OpenAISpec` (`bench/litserve_openai_app.py`). Loopback, batch size 1, every server up "
        f"during every round. Before the rounds: {load[0]}; after: {load[1]} (a shared machine: the rounds are "
        "interleaved so that each server meets the same load).",
    }
