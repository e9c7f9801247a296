"""Benchmark: `msnb export A.mar ... --ray OUT` run with the steps it prints (`serve run serve_config.yaml`) on a
two-node Ray cluster on loopback (one CPU per node), to every archive's first answer, beside a plain TorchServe
registering the same archives on the same machine; for 1, 8 and 32 archives (32: more replicas at 0.1 CPU than the
two CPUs hold, were each archive its own application), the runs interleaved."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import Settings, interleave, summary
from bench.ray_archives import SAMPLE, build

STOP_S = 180  # serve run's Ctrl-C: Serve shut down on a loaded 2-core machine


class Cluster:
    """Two one-CPU nodes on loopback in a private temp root, their environment holding the router's key (as the
    export's printed `ray start` step says)."""

    def __init__(self, root: Path):
        from ray.cluster_utils import Cluster as RayCluster

        from msnb.engines.ray.nodes import AUTH_VARS, node_args, started
        from msnb.templates.msnb_runtime.ray.token_interceptor import KEY_VAR

        self.root, self.key = root, secrets.token_urlsafe(16)
        # this process's Ray token as it was: a smoke run's other benchmarks keep using the process-wide Ray after
        self._token = {key: os.environ.get(key) for key in AUTH_VARS}
        head, worker = node_args(root, 1, head=True), node_args(root, 1, head=False)
        for args in (head, worker):
            args["env_vars"] = {KEY_VAR: self.key}
        with started(root):
            self.cluster = RayCluster(initialize_head=True, head_node_args=head)
            self.cluster.add_node(**worker)

    def shutdown(self) -> None:
        import shutil

        from ray._raylet import AuthenticationTokenLoader, Config

        self.cluster.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)
        for key, value in self._token.items():  # the nodes' token pointed this process's Ray at the cluster's root
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        Config.initialize("")  # Ray caches its config and token in C++: re-read (as nodes.use_token does)
        AuthenticationTokenLoader.instance().reset_cache()


def exported(archives: list[Path], out: Path, port: int) -> Path:
    """`msnb export ARCHIVES --ray OUT --ray-port PORT`, its printed steps discarded."""
    from msnb.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["export", *map(str, archives), "--ray", str(out), "--ray-port", str(port)]) == 0
    return out


def on_ray(cluster: Cluster, folder: Path, names: list[str], port: int) -> float:
    """`RAY_ADDRESS=... serve run serve_config.yaml` from the exported folder to every archive's first answer;
    then Ctrl-C (Serve shut down before the next run)."""
    from msnb.engines.ray.nodes import environment
    from msnb.engines.torchserve import TorchServeClient

    env = {**os.environ, **environment(cluster.root), "RAY_ADDRESS": cluster.cluster.address}
    (folder.parent / "key").write_text(cluster.key)
    client = TorchServeClient.connect(f"http://127.0.0.1:{port}", folder.parent / "key")
    serve = str(Path(sys.executable).with_name("serve"))
    start = time.perf_counter()
    process = subprocess.Popen(
        [serve, "run", "serve_config.yaml"], cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        first_answers(client, names, 600)
        return time.perf_counter() - start
    finally:
        client.close()
        process.send_signal(signal.SIGINT)
        process.wait(STOP_S)


def first_answers(client, names: list[str], bound: float) -> None:
    """Poll until every model answers (bounded)."""
    waiting, deadline = set(names), time.monotonic() + bound
    while waiting:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer from {sorted(waiting)} within {bound} s")
        for name in sorted(waiting):
            try:
                client.predict(name, SAMPLE, timeout=30)
                waiting.discard(name)
            except Exception:
                time.sleep(0.2)


def on_torchserve(work: Path, archives: list[Path]) -> float:
    """A plain TorchServe started, every archive registered and answering once."""
    from msnb.engines.torchserve import LocalServer

    start = time.perf_counter()
    server = LocalServer(Path(tempfile.mkdtemp(dir=work, prefix="ts-")))
    try:
        server.start()
        for path in archives:
            server.register(path)
        for path in archives:
            server.predict(path.stem, SAMPLE)
        return time.perf_counter() - start
    finally:
        server.stop()


def requirement_cost(work: Path, requirement: str = "termcolor") -> dict[str, float]:
    """What one small pure-Python requirement the node lacks costs an exported application: seconds and bytes of its
    install beside the model folders (``runtime_env.install_once``, as the first replica of a node runs it), and
    the seconds a second replica takes to find it installed."""
    from msnb.templates.msnb_runtime.ray import runtime_env

    folder = work / "requirement" / "model"
    folder.mkdir(parents=True, exist_ok=True)
    path = list(sys.path)
    try:
        start = time.perf_counter()
        target = runtime_env.install_once(folder, [requirement])
        first = time.perf_counter() - start
        sys.path[:] = path
        start = time.perf_counter()
        runtime_env.install_once(folder, [requirement])
        again = time.perf_counter() - start
    finally:
        sys.path[:] = path
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    return {"install s": first, "installed bytes": size, "found installed s": again}


def run(settings: Settings) -> dict:
    from msnb.engines.ray.nodes import free_port

    work = settings.workdir / "ray_cluster_start"
    counts = sorted({1, settings.size(8, 8, 1), settings.size(32, 32, 1)})
    archives = [build(work / "mars", f"tiny{i}") for i in range(counts[-1])]
    cost = requirement_cost(work)
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="msnbbc-", dir="/tmp")))  # short: Ray's socket paths
    try:
        variants, asked = {}, {}
        for n in counts:
            port = free_port()
            folder = exported(archives[:n], work / f"out{n}", port)
            asked[n] = asked_cpus(folder)
            names = [p.stem for p in archives[:n]]
            variants[f"torchserve {n}"] = lambda a=archives[:n]: on_torchserve(work, a)
            variants[f"ray {n}"] = lambda f=folder, m=names, p=port: on_ray(cluster, f, m, p)
        times = interleave(variants, settings.reps)
    finally:
        cluster.shutdown()
    result = report(times, counts, settings)
    result["rows"].update({f"CPUs the export asks, {n} archive(s)": summary([v]) for n, v in asked.items()})
    result["rows"].update({f"one requirement the node lacks (termcolor): {k}": summary([v]) for k, v in cost.items()})
    if not settings.smoke:
        append(result)
    return result


def asked_cpus(folder: Path) -> float:
    """The CPUs the exported application asks of its cluster in all (what `msnb export --ray` prints)."""
    import yaml

    from msnb.engines.ray.sizing import needs

    config = yaml.safe_load((folder / "serve_config.yaml").read_text())
    return round(sum(count * ask.get("CPU", 0.0) for _, count, ask in needs(folder, config)), 4)


def report(times: dict, counts: list[int], settings: Settings) -> dict:
    rows = {f"every first answer, {k.split()[1]} archive(s): {k.split()[0]} s": summary(v) for k, v in times.items()}
    med = {k: v["median"] for k, v in rows.items()}
    ratios = {
        f"Ray cluster / TorchServe, {n} archive(s)": med[f"every first answer, {n} archive(s): ray s"]
        / med[f"every first answer, {n} archive(s): torchserve s"]
        for n in counts
    }
    return {
        "title": "An export's `serve run` on a two-node Ray cluster beside a plain TorchServe",
        "unit": "s",
        "rows": rows,
        "ratios": ratios,
        "notes": f"{settings.mode}{settings.reps} interleaved run(s) each; archives made by torch-model-archiver (the "
        "tiny MLP of ray_archives); Ray: `serve run serve_config.yaml` of `msnb export --ray` (its defaults: "
        "up to 8 archives in a replica set, 0.1 CPU a replica) on a running two-node cluster (one CPU each, loopback) to every archive's first answer, "
        "Serve started by `serve run` each time; TorchServe: start, register each, one answer each. The machine is "
        "shared with other test runs (2 cores): the ratio holds better than the seconds.",
    }


RESULTS = Path(__file__).parent / "RAY_CLUSTER_START.md"
PLOT = Path(__file__).parent / "ray_cluster_start.png"


def plot(result: dict, path: Path = PLOT) -> None:
    """Bars: seconds to every first answer, TorchServe beside the Ray cluster, for each archive count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = "every first answer, "  # (the requirement's rows beside them are not bars)
    counts = sorted({int(k.split(", ")[1].split()[0]) for k in result["rows"] if k.startswith(first)})
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for offset, kind in ((-0.2, "torchserve"), (0.2, "ray")):
        medians = [result["rows"][f"every first answer, {n} archive(s): {kind} s"]["median"] for n in counts]
        ax.bar([i + offset for i in range(len(counts))], medians, width=0.4, label=kind)
    ax.set_xticks(range(len(counts)), [f"{n} archive(s)" for n in counts])
    ax.set_ylabel("s to every first answer")
    ax.set_title("serve run of the export on 2 x 1-CPU nodes vs plain TorchServe", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def append(result: dict) -> None:
    """The run's table, appended to bench/RAY_CLUSTER_START.md under its date and load average, and its plot."""
    from bench.report import append_run

    append_run(RESULTS, result, __doc__, tail=f"\n![the last run]({PLOT.name})\n")
    plot(result)


def main() -> None:
    """`python -m bench.ray_cluster_start`: one quick interleaved run, appended to bench/RAY_CLUSTER_START.md."""
    from bench.ray_archives import OneRun

    with tempfile.TemporaryDirectory(prefix="msnb-bench-") as tmp:
        print(run(OneRun(quick=True, workdir=Path(tmp))))


if __name__ == "__main__":
    main()
