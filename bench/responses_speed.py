"""Benchmark: the first event of OpenAI's Responses API beside chat completions, from the same server. The official
``openai`` client streams the generator of bench/openai_speed_cell.py through ``client.responses.create(...,
stream=True)`` and through ``client.chat.completions.create(..., stream=True)`` on msnb's TorchServe front and Ray
Serve router, and through LitServe 0.2.19's ``OpenAISpec`` (chat only: LitServe serves no Responses API), rounds
interleaved; it measures the time to the first text delta (the first event that carries text) and pieces per second.
The goal: the Responses API costs no more than chat completions."""

from __future__ import annotations

import importlib.util
import multiprocessing
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from bench.harness import Settings, interleave_servers, load_average, summary
from bench.openai_speed import LITSERVE, MESSAGES, NAME, ROUNDS_FULL, ROUNDS_QUICK, _litserve, _msnb
from bench.openai_speed_cell import TOKENS

CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
_CLIENTS: dict[str, object] = {}  # in the client's process: one per server, kept alive


def streamed(base_url: str, key: str, model: str, route: str) -> tuple[float, float]:
    """One streamed answer through ``route``: ms to its first text delta, and text deltas per second."""
    from openai import OpenAI

    client = _CLIENTS.setdefault(base_url, OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120))
    start, first, pieces = time.perf_counter(), None, 0
    if route == RESPONSES:
        events = client.responses.create(model=model, input=MESSAGES, stream=True)
        texts = (e.delta for e in events if e.type == "response.output_text.delta")
    else:
        chunks = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
        texts = (c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content)
    for _ in texts:
        first = first if first is not None else time.perf_counter() - start
        pieces += 1
    if pieces != TOKENS:
        raise RuntimeError(f"{model} {route} streamed {pieces} text deltas, not {TOKENS}")
    return first * 1000, pieces / (time.perf_counter() - start)


def run(settings: Settings) -> dict:
    work = settings.workdir / "responses_speed"
    work.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as client:
        up: dict[str, tuple[str, str]] = {}  # server -> (base URL, key): both routes' rows share one server

        def start(server: str, serve: Callable, model: str, route: str) -> Callable[[], tuple]:
            def started() -> tuple[Callable[[], tuple[float, float]], Callable[[], None]]:
                stop = lambda: None  # noqa: E731 - the server's first row stops it
                if server not in up:
                    base_url, key, stop = serve()
                    up[server] = (base_url, key)
                return lambda: client.submit(streamed, *up[server], model, route).result(), stop

            return started

        starts = {}
        for server, kind in (("TorchServe (msnb)", "torchserve"), ("Ray Serve (msnb)", "ray")):
            if kind == "ray" and (settings.smoke or importlib.util.find_spec("ray") is None):
                continue
            for route in (CHAT, RESPONSES):
                starts[f"{server} {route}"] = start(server, lambda kind=kind: _msnb(kind, work, settings), NAME, route)
        if importlib.util.find_spec("litserve") is not None:
            starts[LITSERVE] = start(LITSERVE, lambda: _litserve(work), "lit", CHAT)
        load = [load_average()]
        runs = interleave_servers(starts, settings.size(ROUNDS_FULL, ROUNDS_QUICK, 1))
        load.append(load_average())
    rows = {n: {"first event ms": [r[0] for r in rs], "tokens per s": [r[1] for r in rs]} for n, rs in runs.items()}
    return report(rows, settings, load)


def report(rows: dict, settings: Settings, load: list[str]) -> dict:
    ratios, targets = {}, []
    for name in [n for n in rows if n.endswith(RESPONSES)]:
        chat = name.removesuffix(RESPONSES) + CHAT
        first, chat_first = (statistics.median(rows[n]["first event ms"]) for n in (name, chat))
        ratios[f"{name.removesuffix(' ' + RESPONSES)}: responses' first event / chat's"] = first / chat_first
        targets.append(
            {
                "target": f"{name}: first event no later than chat completions'",
                "value": f"{first:.1f} vs {chat_first:.1f} ms",
                "met": first <= chat_first,
            }
        )
        if LITSERVE in rows:
            ratios[f"{name}: first event / LitServe's chat"] = first / statistics.median(
                rows[LITSERVE]["first event ms"]
            )
    return {
        "title": "OpenAI's Responses API beside chat completions: the first event, msnb and LitServe's OpenAISpec",
        "unit": "ms, tokens/s",
        "rows": {name: {k: summary(v) for k, v in row.items()} for name, row in rows.items()},
        "ratios": ratios,
        "targets": targets,
        "notes": f"{settings.mode}one streamed answer of {TOKENS:,} text pieces (bench/openai_speed_cell.py), asked "
        "through `client.responses.create(stream=True)` and `client.chat.completions.create(stream=True)` of the "
        "official `openai` client in a process of its own (one client per server, kept alive); the first event is "
        "the first one carrying text (`response.output_text.delta`: the Responses API's opening events go out in "
        "the same write). LitServe 0.2.19 serves no Responses API: its chat completions are the anchor. Rounds "
        f"interleaved, every server up in every round. Before the rounds: {load[0]}; after: {load[1]} (a shared "
        "machine: the rounds are interleaved so that each route meets the same load).",
    }
