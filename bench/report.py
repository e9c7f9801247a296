"""Write a benchmark run as results.json (raw numbers), RESULTS.md (tables, ratios, verdicts) and results.png."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import psutil

# Which leaf measurements each plot panel shows: (benchmark, metric or None for all, panel title, unit).
PANELS = [
    ("inner_loop", None, "1. Warm inner loop", "s (median, min-max)"),
    ("cold_start", None, "2. Cold start and stop", "s"),
    ("checkpoint", "total s", "3. Build + register", "s (log)"),
    ("checkpoint", "build peak MiB", "3. Build peak RSS", "MiB"),
    ("throughput", "rps", "4. Throughput", "req/s"),
    ("overhead", None, "5. handle() vs forward, batch of 8", "µs per call (log)"),
    ("explain", None, "6. Explanation latency (IG, 50 steps)", "ms per request (log)"),
    ("beside_litserve", "edit -> new answer s", "9. Edit -> new answer, vs LitServe", "s"),
    ("beside_litserve", "tiny p99 ms", "9. Tiny MLP p99, 16 clients", "ms"),
    ("beside_litserve", "tiny rps", "9. Tiny MLP throughput, 16 clients", "req/s"),
    ("beside_litserve", "batched p99 ms", "9. Batched MLP p99, 16 clients", "ms"),
    ("beside_litserve", "PSS after load MiB", "9. Server PSS after the tiny load", "MiB"),
    ("light_processes", "PSS MiB", "11. Served tree PSS by process (tiny MLP)", "MiB"),
    ("light_processes", "cold start -> first answer s", "11. Serve call -> first answer", "s"),
    ("light_processes", "wall s", "11. The msnb command's help", "s"),
    ("ray_serve", "rps", "Ray Serve vs TorchServe, 16 clients", "req/s"),
    ("ray_management", None, "Management API: Ray vs TorchServe", "s"),
    ("streaming", "first chunk ms", "Streaming: time to first chunk", "ms"),
    ("streaming", "per chunk ms", "Streaming: time per chunk", "ms"),
    ("stream_speed", "first token ms", "LitServe's stream speed test: first token", "ms"),
    ("stream_speed", "tokens per s", "LitServe's stream speed test: tokens/s", "tokens/s"),
    ("openai_speed", "first token ms", "OpenAI API streamed: first token", "ms"),
    ("openai_speed", "tokens per s", "OpenAI API streamed: tokens/s", "tokens/s"),
    ("responses_speed", "first event ms", "Responses API vs chat: first event", "ms"),
    ("shadow", "rps", "msnb shadow: through the front vs straight, 16 clients", "req/s"),
    ("shadow", "p99_ms", "msnb shadow: p99 through the front vs straight", "ms"),
]
# Labels of the anchors (blue); everything else is msnb (orange).
ANCHORS = ("manual", "default .mar", "hand-written", "raw model", r"batch 1$", r"\(anchor\)")


def machine() -> dict:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": sys.version.split()[0],
        "java": java[0] if java else "?",
        **{pkg: metadata.version(pkg) for pkg in ("torch", "torchserve", "torch-model-archiver")},
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }


def leaves(node: dict, path: tuple = ()) -> list[tuple[tuple, dict]]:
    """Every summary (a dict with a median) under ``node``, with the keys leading to it."""
    if "median" in node:
        return [(path, node)]
    out = []
    for key, value in node.items():
        if isinstance(value, dict):
            out.extend(leaves(value, path + (str(key),)))
    return out


def merge(out: Path, results: dict, meta: dict) -> tuple[dict, dict]:
    """The last run's results (``out/results.json``) with ``results`` replacing their sections."""
    try:
        last = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return results, meta
    merged = {**last["results"], **results}
    reran = f"{', '.join(results)} re-run {meta['machine']['date']} ({meta['seconds']:.0f} s)"
    return merged, {**last["meta"], "partial_runs": [*last["meta"].get("partial_runs", []), reran]}


def write(results: dict, meta: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    (out / "RESULTS.md").write_text(markdown(results, meta))
    plot(results, out / "results.png")


def markdown(results: dict, meta: dict) -> str:
    lines = [
        "# msnb benchmarks",
        "",
        f"`python -m bench{' --quick' * meta['quick']}{' --smoke' * meta.get('smoke', False)}` took {meta['seconds']:.0f} s. Machine and versions:",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in meta["machine"].items()] + [f"- load average at end: {meta['load_end']}", ""]
    lines += [f"Partial run since: {run}" for run in meta.get("partial_runs", [])] + [""] * bool(
        meta.get("partial_runs")
    )
    lines += [
        "Medians of interleaved repetitions (A B A B ...), min–max in brackets; the machine is shared "
        "and noisy, so read the ratios, not single times.",
        "",
        "## Targets",
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
    ]
    for res in results.values():
        for t in res.get("targets", []):
            lines.append(f"| {t['target']} | {t['value']} | {'met' if t['met'] else '**not met**'} |")
    for key, res in results.items():
        lines += ["", f"## {res.get('title', key)}", ""]
        if "error" in res:
            lines += [f"Failed: `{res['error']}`"]
            continue
        if "skipped" in res:
            lines += [f"Skipped: {res['skipped']}"]
            continue
        lines += [f"| measurement ({res['unit']}) | median | min–max | n |", "|---|---|---|---|"]
        for path, s in leaves(res["rows"]):
            lines.append(f"| {' / '.join(path)} | {_fmt(s['median'])} | {_fmt(s['min'])}–{_fmt(s['max'])} | {s['n']} |")
        lines += [""] + [f"- ratio {k}: **{v:.2f}**" for k, v in res.get("ratios", {}).items()]
        lines += [f"- batching hurts: {h}" for h in res.get("batching_hurts", [])]
        lines += ["", res.get("notes", "")]
    return "\n".join(lines) + "\n"


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def plot(results: dict, path: Path) -> None:
    panels = [panel for panel in PANELS if panel[0] in results]  # a run of some benchmarks (--only) plots those
    rows_of_panels = max(1, -(-len(panels) // 3))
    fig, axes = plt.subplots(rows_of_panels, 3, figsize=(18, 5.5 * rows_of_panels), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (key, metric, title, unit) in zip(axes.flat, panels):
        ax.set_title(title)
        if key not in results or "error" in results[key] or "skipped" in results[key]:
            ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
            continue
        rows = [(p, s) for p, s in leaves(results[key]["rows"]) if metric is None or p[-1] == metric]
        labels = [" / ".join(p[:-1] if metric else p) for p, _ in rows]
        medians = [s["median"] for _, s in rows]
        spread = [[s["median"] - s["min"] for _, s in rows], [s["max"] - s["median"] for _, s in rows]]
        colors = ["tab:blue" if any(re.search(a, label) for a in ANCHORS) else "tab:orange" for label in labels]
        ax.barh(range(len(rows)), medians, xerr=spread, color=colors, capsize=3)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        if "log" in unit:
            ax.set_xscale("log")
        if metric == "build peak MiB":
            ax.axvline(results[key]["baseline_peak_mib"], color="gray", linestyle="--", label="import baseline")
            ax.legend(fontsize=7)
    fig.suptitle("msnb (orange) vs anchors (blue): medians with min–max", fontsize=14)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def append_run(results: Path, result: dict, doc: str, tail: str = "") -> None:
    """A run's table (``result``: title, rows of medians, optional ratios, notes), appended to ``results`` (a
    bench/*.md) under its date and load average; a new file opens with the title and the benchmark's ``doc``."""
    lines = [
        f"\n## {machine()['date']} (load average at start {machine()['load_average_at_start']})\n",
        "| measurement | median |",
        "|---|---|",
    ]
    lines += [f"| {name} | {row['median']:.3g} |" for name, row in result["rows"].items()]
    lines += [f"| {name} | **{value:.2f}** |" for name, value in result.get("ratios", {}).items()]
    lines += ["", result["notes"]]
    head = results.read_text() if results.exists() else f"# {result['title']}\n\n{doc}\n"
    results.write_text(head + "\n".join(lines) + "\n" + tail)
