"""Shared benchmark helpers: A/B interleaving, summaries, child peak memory, process waits, load generators."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class Settings:
    """How big a run is: ``quick`` shrinks every benchmark to a short version; ``smoke`` (which implies
    ``quick``) to the least that still runs each benchmark's every path once, for the test that the harness runs."""

    quick: bool
    workdir: Path
    smoke: bool = False

    def size(self, full: Any, quick: Any, smoke: Any = None) -> Any:
        """This run's value of one size: the full run's, the quick run's or the smoke run's (default: quick's)."""
        if self.smoke and smoke is not None:
            return smoke
        return quick if self.quick else full

    @property
    def reps(self) -> int:
        return self.size(5, 2, 1)

    @property
    def mode(self) -> str:
        """The run's size as a note's prefix: "smoke mode: ", "quick mode: " or nothing (the full run)."""
        return self.size("", "quick mode: ", "smoke mode: ")


def ray_engine(settings: Settings) -> Any:
    """A local Ray for one measurement; a smoke run's benchmarks share the process-wide one (one Ray start)."""
    from msnb.engines.ray.engine import LocalRay, default_ray

    return default_ray() if settings.smoke else LocalRay()


def msnb_engine(kind: str, work: Path, settings: Settings) -> Any:
    """msnb's engine of ``kind`` ("torchserve": a LocalServer with its own workdir under ``work``; "ray": see
    ``ray_engine``), not started yet; a smoke run's benchmarks share the process-wide TorchServe (started here: one
    TorchServe start for all of them) as they share its Ray."""
    if kind == "ray":
        return ray_engine(settings)
    from msnb.engines.torchserve import LocalServer, default_server

    return default_server() if settings.smoke else LocalServer(work / f"ts-{time.monotonic_ns()}")


def inference_headers(engine: Any) -> dict:
    """The Authorization header with a started engine's inference key (both engines ask for it), or none."""
    if engine.key_file is None:
        return {}
    return {"Authorization": f"Bearer {json.loads(engine.key_file.read_text())['inference']['key']}"}


def stop_engine(engine: Any, settings: Settings) -> None:
    """Stop an engine after its measurement, except the smoke run's shared ones (stopped at exit): the shared
    TorchServe only unregisters its models, so the next benchmark finds it empty."""
    from msnb.engines.ray.engine import default_ray
    from msnb.engines.torchserve import default_server

    if not settings.smoke:
        engine.stop()
    elif engine is default_server(create=False):
        for name in sorted({status.name for status in engine.models()}):
            engine.unregister(name)
    elif engine is not default_ray():
        engine.stop()


def msnb_serving(kind: str, work: Path, settings: Settings, name: str, cell: str) -> tuple[Any, Callable[[], None]]:
    """msnb's engine of ``kind`` (see ``msnb_engine``), started, serving handler cell ``cell`` as model ``name``;
    and how to stop it (``stop_engine``)."""
    from msnb.session.deployment import deploy
    from msnb.spec import spec_from_source

    engine = msnb_engine(kind, work, settings)
    engine.start()
    try:
        deploy(engine, spec_from_source(name, cell))
    except BaseException:
        stop_engine(engine, settings)
        raise
    return engine, lambda: stop_engine(engine, settings)


def interleave_servers(
    starts: dict[str, Callable[[], tuple[Callable[[], Any], Callable[[], None]]]], reps: int
) -> dict[str, list]:
    """Start every server (``starts``: name -> a call that starts it and returns its measure and its stop), warm
    each up with one measure, then run the measures interleaved ``reps`` times; every server is up during every
    round and stopped at the end, even when one fails."""
    stops, measures = [], {}
    try:
        for name, start in starts.items():
            measure, stop = start()
            stops.append(stop)
            measures[name] = measure
        for measure in measures.values():  # warm-up
            measure()
        return interleave(measures, reps)
    finally:
        for stop in stops:
            stop()


class Steps:
    """Wall time between successive marks, from the object's creation; ``wrap`` marks after each call of a function
    (its step's name, or a function of the call's arguments that names it)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.times: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = self.times.get(name, 0.0) + now - self.last
        self.last = now

    def wrap(self, owner: object, attr: str, name: str | Callable[..., str]) -> None:
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            result = original(*args, **kwargs)
            self.mark(name(*args, **kwargs) if callable(name) else name)
            return result

        setattr(owner, attr, timed)

    def total(self) -> dict[str, float]:
        return {**self.times, "TOTAL": time.perf_counter() - self.start}


def load_average() -> str:
    """The machine's load average now (1, 5 and 15 minutes), as a note writes it beside the figures."""
    return "load average {:.1f} / {:.1f} / {:.1f} (1 / 5 / 15 min)".format(*os.getloadavg())


def interleave(variants: dict[str, Callable[[], Any]], reps: int) -> dict[str, list]:
    """Run the variants A B A B ... ``reps`` times each; returns each variant's list of measurements."""
    results: dict[str, list] = {name: [] for name in variants}
    for _ in range(reps):
        for name, measure in variants.items():
            results[name].append(measure())
    return results


def summary(values: list[float]) -> dict[str, Any]:
    """Median, min, max and the raw values of one measurement series."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "values": [round(v, 6) for v in values],
    }


def ratio(slow: dict, fast: dict) -> float:
    return slow["median"] / fast["median"] if fast["median"] else float("nan")


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# Runs in a small Python that only waits: RUSAGE_CHILDREN then holds the command's own peak RSS. (Measured
# from this process directly, ru_maxrss would include the parent's RSS, inherited at fork/exec time.)
_PEAK_WRAPPER = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(rc)"
)


def run_child(
    cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None, peak: bool = False
) -> dict[str, float]:
    """Run ``cmd`` to completion (failing loudly): its wall time and, with ``peak``, its peak RSS in MiB."""
    peak_file = log.with_suffix(".peak")
    full = [sys.executable, "-c", _PEAK_WRAPPER, str(peak_file), *cmd] if peak else cmd
    start = time.perf_counter()
    with open(log, "ab") as out:
        rc = subprocess.call(full, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    seconds = time.perf_counter() - start
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {rc}:\n{log.read_text(errors='replace')[-2000:]}")
    result = {"seconds": seconds}
    if peak:
        result["peak_rss_mib"] = int(peak_file.read_text()) / 1024  # Linux: ru_maxrss is in KiB
    return result


def wait_gone(procs: list[psutil.Process], timeout: float = 30.0) -> None:
    """Block until every process in ``procs`` has exited (zombies count as gone); TimeoutError otherwise."""
    from msnb.engines.watchdog import wait_gone as wait

    left = wait(procs, timeout)
    if left:
        raise TimeoutError(f"process {left[0].pid} still running after {timeout} s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def load(url: str, body: bytes, requests: int, clients: int, headers: dict, wall_cap: float) -> dict[str, float]:
    """POST ``body`` ``requests`` times from ``clients`` keep-alive threads (stopping at ``wall_cap`` s)."""
    host_port, path = url.split("://", 1)[1].split("/", 1)
    host, port = host_port.split(":")
    state = {"issued": 0, "errors": 0}
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + wall_cap
    headers = {"Content-Type": "application/json", **headers}

    def client() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        while True:
            with lock:
                if state["issued"] >= requests or time.perf_counter() > deadline:
                    break
                state["issued"] += 1
            start = time.perf_counter()
            ok = _post(conn, "/" + path, body, headers)
            with lock:
                latencies.append(time.perf_counter() - start)
                state["errors"] += not ok
        conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "requests": len(latencies),
        "errors": state["errors"],
    }


def _post(conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict) -> bool:
    try:
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        conn.close()  # reconnects on the next request
        return False


class ClientThreads:
    """``clients`` threads running ``_loop`` from the start of a ``with`` block until its end (``stopping``)."""

    def __init__(self, clients: int):
        self.stopping = threading.Event()
        self.log: list = []
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(clients)]

    def _loop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)


class ClientLoad(ClientThreads):
    """``clients`` threads calling ``ask()`` in a loop until the block ends; each call logged as
    (sent, seconds, the answer or the MsnbError it raised). The redeploy benchmark and test share it."""

    def __init__(self, ask: Callable[[], Any], clients: int):
        super().__init__(clients)
        self.ask = ask

    def _loop(self) -> None:
        from msnb.errors import MsnbError

        while not self.stopping.is_set():
            sent = time.monotonic()
            try:
                answer = self.ask()
            except MsnbError as err:
                answer = err
            self.log.append((sent, time.monotonic() - sent, answer))  # list.append is atomic
