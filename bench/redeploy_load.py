"""Benchmark 6, redeploy under load: clients keep predicting while new versions replace the old one."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench import models
from bench.harness import ClientLoad, Settings, msnb_engine, percentile, stop_engine, summary, timed
from msnb.engines.torchserve import LocalServer
from msnb.engines.torchserve.deploy import drain
from msnb.session.deployment import deploy

NAME = "underload"
CLIENTS = 8
CONFIG = {"batch_size": 8, "max_batch_delay": 20}  # the attack run's setting
RESULTS = Path(__file__).with_name("results.json")  # where the warm inner loop's last median is read from
DRAIN_SHARE = 0.10  # draining may add this share of the warm inner loop


def run(settings: Settings) -> dict:
    work = settings.workdir / "redeploy_load"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "model.pt")
    steady_s, redeploys = settings.size((5.0, 5), (2.0, 2), (1.0, 1))
    server = msnb_engine("torchserve", work, settings)
    try:
        server.start()
        deploy(server, _spec(checkpoint, 0))
        with ClientLoad(lambda: server.predict(NAME, models.SAMPLE, timeout=30), CLIENTS) as traffic:
            time.sleep(steady_s)  # steady-state traffic to compare with (a measurement window, not a wait)
            swaps = [_swap(server, checkpoint, revision) for revision in range(1, redeploys + 1)]
            time.sleep(1.0)  # traffic after the last swap: stale answers would show here
        # what draining adds to the inner loop when no traffic runs: the same drain on an idle version
        idle = [timed(lambda: drain(server.client, server.status(NAME))) for _ in range(settings.reps)]
        log = [(sent, seconds, _revision(answer)) for sent, seconds, answer in traffic.log]
        return report(log, swaps, steady_until=swaps[0][0], idle_drain=idle)
    finally:
        stop_engine(server, settings)


def _revision(answer) -> int | None:
    """Which revision answered (None: the request failed)."""
    return answer.get("revision") if isinstance(answer, dict) else None


def _spec(checkpoint: Path, revision: int):
    return models.mlp_spec(NAME, models.SMALL, checkpoint, revision=revision, **CONFIG)


def _swap(server: LocalServer, checkpoint: Path, revision: int) -> tuple[float, float, int]:
    """One edit served under traffic: (start, return, revision)."""
    start = time.monotonic()
    deploy(server, _spec(checkpoint, revision))
    return start, time.monotonic(), revision


def report(log: list, swaps: list[tuple[float, float, int]], steady_until: float, idle_drain: list) -> dict:
    lost = [entry for entry in log if entry[2] is None]
    stale = [e for e in log for _, back, rev in swaps if e[0] > back and e[2] is not None and e[2] < rev]
    steady = [lat * 1000 for sent, lat, rev in log if sent < steady_until and rev is not None]
    during = [lat * 1000 for sent, lat, rev in log for s, back, _ in swaps if s <= sent <= back and rev is not None]
    takeover = [_all_new_after(log, swap) for swap in swaps]
    rows = {
        "steady state": {"latency ms (median = p50)": _dist(steady), "p99 ms": summary([percentile(steady, 0.99)])},
        "during a swap": {"latency ms (median = p50)": _dist(during), "p99 ms": summary([percentile(during, 0.99)])},
        "redeploy under load s": summary([back - start for start, back, _ in swaps]),
        "until the new version serves all traffic s": summary(takeover),
        "drain with no traffic ms": summary([t * 1000 for t in idle_drain]),
    }
    return {
        "title": "6. Redeploy under load (8 clients, batch 8 / 20 ms, tiny MLP)",
        "unit": "ms or s",
        "rows": rows,
        "targets": [
            {"target": "no request lost during redeploys", "value": f"{len(lost)} of {len(log)}", "met": not lost},
            {"target": "no old-version answer after redeploy() returns", "value": str(len(stale)), "met": not stale},
            _drain_target(rows["drain with no traffic ms"]["median"], warm_loop_s()),
        ],
        "notes": f"{len(log)} requests sent by {CLIENTS} client threads through LocalServer.predict (requests "
        f"through msnb's client) while {len(swaps)} edits were deployed with msnb.session.deploy (build, register the "
        "new version, set-default, drain the old one, unregister it). 'Until the new version serves all traffic' is "
        "from the start of deploy() to the send time after which every answer came from the new version.",
    }


def warm_loop_s() -> float | None:
    """The warm inner loop's median from the last inner_loop run in bench/results.json (None: no such run)."""
    try:
        return float(json.loads(RESULTS.read_text())["results"]["inner_loop"]["rows"]["msnb redeploy"]["median"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _drain_target(drain_ms: float, warm_s: float | None) -> dict:
    """Draining adds at most DRAIN_SHARE to the warm inner loop (as inner_loop last measured it)."""
    share = f"{DRAIN_SHARE:.0%}"
    if warm_s is None:
        return {
            "target": f"draining adds <= {share} to the warm loop (no inner_loop result)",
            "met": False,
            "value": f"{drain_ms:.0f} ms",
        }
    budget_ms = warm_s * 1000 * DRAIN_SHARE
    return {
        "target": f"draining adds <= {share} to the {warm_s:.2f} s warm loop (idle drain <= {budget_ms:.0f} ms)",
        "value": f"{drain_ms:.0f} ms",
        "met": drain_ms <= budget_ms,
    }


def _dist(values: list[float]) -> dict:
    """A summary without the raw values: thousands of latencies would swamp results.json."""
    return {**summary(values), "values": []}


def _all_new_after(log: list, swap: tuple[float, float, int]) -> float:
    start, _, revision = swap
    old = [sent for sent, _, rev in log if sent >= start and rev is not None and rev < revision]
    return (max(old) if old else start) - start
