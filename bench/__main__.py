"""`python -m bench [NAME ...] [--quick | --smoke] [--only NAME ...] [--out DIR]`: run msnb's benchmarks and write their report."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import report
from bench.harness import Settings

BENCHMARKS = (
    "inner_loop",
    "cold_start",
    "checkpoint",
    "throughput",
    "overhead",
    "hermetic",
    "explain",
    "redeploy_load",
    "local_test",
    "explain_load",
    "file_copy",
    "capture_size",
    "runtime_values",
    "hf_objects",
    "beside_litserve",
    "ts_settings",
    "ray_serve",
    "ray_archives",
    "ray_management",
    "streaming",
    "stream_speed",
    "openai_speed",
    "responses_speed",
    "light_processes",
    "secret_scan",
    "shadow",
    "ray_cluster_start",  # last: a two-node cluster of its own, and this process's Ray token restored after it
)
# The benchmarks that start a Ray where the extra is installed (the smoke test runs them in the Ray tier's group, one
# Ray at a time, and the others beside it; a benchmark not named here that reports a Ray row fails that test).
RAY_BENCHMARKS = frozenset(
    {"ray_serve", "ray_archives", "ray_management", "streaming", "stream_speed", "ray_cluster_start"}
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="the benchmarks to run, as --only names them")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        action="store_true",
        help="short run (< 3 min): fewer repetitions, smaller checkpoints, fewer requests",
    )
    size.add_argument(
        "--smoke",
        action="store_true",
        help="the least run that still exercises every benchmark's paths (its figures mean nothing): "
        "the quick run with one repetition, the smallest sizes and request counts, one point per curve",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=BENCHMARKS,
        metavar="NAME",
        help=f"run only these benchmarks ({', '.join(BENCHMARKS)})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent,
        help="where RESULTS.md, results.json and results.png go (default: bench/)",
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"no benchmark named {', '.join(unknown)} (choose from {', '.join(BENCHMARKS)})")
    args.only = (args.only or []) + args.names or None
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    workdir = Path(tempfile.mkdtemp(prefix="msnb-bench-"))  # checkpoints (up to 1 GiB) and servers; deleted
    settings = Settings(quick=args.quick or args.smoke, workdir=workdir, smoke=args.smoke)
    meta = {"quick": args.quick, "smoke": args.smoke, "machine": report.machine()}
    results, start = {}, time.perf_counter()
    try:
        for name in args.only or BENCHMARKS:
            results[name] = run_one(name, settings)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    meta.update(seconds=time.perf_counter() - start, load_end=[round(x, 1) for x in os.getloadavg()])
    if args.only:  # a partial run updates its sections and keeps the others of the last run
        results, meta = report.merge(args.out, results, meta)
    report.write(results, meta, args.out)
    print(f"wrote {args.out / 'RESULTS.md'} in {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if any("error" in r for r in results.values()) else 0


def run_one(name: str, settings: Settings) -> dict:
    """One benchmark; a failure is recorded (and printed) so the others still run."""
    print(f"[bench] {name} ...", flush=True)
    start = time.perf_counter()
    try:
        result = importlib.import_module(f"bench.{name}").run(settings)
    except Exception as err:  # report it and go on with the next benchmark
        traceback.print_exc()
        result = {"title": name, "error": f"{type(err).__name__}: {err}"[:1000]}
    result["seconds"] = time.perf_counter() - start
    print(f"[bench] {name} done in {result['seconds']:.0f} s", flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
