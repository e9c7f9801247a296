"""What a Ray Serve application asks of its cluster, checked when it is built: a replica no node can hold, an
application larger than the whole cluster; and its requirements, of which only what the node lacks is installed,
once per node, beside the model folders.

Ray never refuses a replica it cannot place: it logs "taken more than 30s to be scheduled" every 30 s for as long as
one waits. The application builders (``msnb_runtime.ray.app:model``) check here first and fail with what was asked.
Depends on the standard library (``packaging`` and ``ray`` where it reads the node), never on msnb.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# Deployment options (ray_actor_options) -> the names Ray gives the resources in a node's totals.
ASKED = (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory"))
GIB = 1024**3
# Installed once per node and never a second time at another version (a second torch is gigabytes).
NODE_OWNED = ("torch", "torchserve", "ray")
# Where a model's requirements go, next to its model (as TorchServe's install_py_dep_per_model installs them into the
# model's folder): one folder per set of requirements, shared by the node's replicas of every application that needs it.
REQUIREMENTS_DIR = ".msnb-requirements"
INSTALL_HINT = (
    "make the package reachable from the nodes' package index (pip's PIP_INDEX_URL / PIP_EXTRA_INDEX_URL where the "
    "nodes run) or install it into the nodes' image; a requirement the node already satisfies is never installed"
)
CHECK_HINT = (
    "ask for less where the application is exported (`msnb export ... --ray OUT --num-cpus NAME=0.25`, "
    "--num-gpus, --memory) or in its args in serve_config.yaml (num_cpus, num_gpus, memory), or add a node that "
    "has it; a cluster that adds nodes itself (an autoscaler) can skip this check with check_resources: false in "
    "the application's args"
)


class UnplaceableError(RuntimeError):
    """An application whose replicas no node of the cluster can hold."""


def asked(actor: dict) -> dict[str, float]:
    """One replica's ask, as Ray names resources: CPU, GPU, memory (bytes) and custom resources."""
    ask = {name: float(actor[key]) for key, name in ASKED if actor.get(key)}
    ask.update({str(k): float(v) for k, v in (actor.get("resources") or {}).items() if v})
    return ask


def replicas(options: dict) -> int:
    """The replicas an application starts with (num_replicas, or its autoscaling's min_replicas)."""
    scaling = options.get("autoscaling_config") or {}
    return int(options.get("num_replicas") or scaling.get("min_replicas") or 1)


def shown(resources: dict[str, float]) -> str:
    """``{"CPU": 0.5, "memory": 2 GiB}`` as "0.5 CPU, 2 GiB memory"."""
    parts = [f"{v / GIB:g} GiB memory" if k == "memory" else f"{v:g} {k}" for k, v in resources.items()]
    return ", ".join(parts) or "nothing"


def refusal(name: str, ask: dict[str, float], count: int, nodes: list[dict]) -> str | None:
    """Why ``count`` replicas of application ``name`` asking ``ask`` each can never all be placed on ``nodes``
    (each alive node's total resources); None when they can."""
    if not any(all(node.get(k, 0) + 1e-9 >= v for k, v in ask.items()) for node in nodes):
        largest = {k: max((node.get(k, 0) for node in nodes), default=0) for k in ask}
        return (
            f"A replica of {name} asks for {shown(ask)}; no node of this cluster has that "
            f"(the most one node has: {shown(largest)})."
        )
    total = {k: sum(node.get(k, 0) for node in nodes) for k in ask}
    if any(count * v > total[k] + 1e-9 for k, v in ask.items()):
        whole = {k: count * v for k, v in ask.items()}
        return f"The {count} replicas of {name} ask for {shown(whole)} in all; the whole cluster has {shown(total)}."
    return None


def check(name: str, options: dict) -> None:
    """Raise ``UnplaceableError`` (what was asked, what the cluster has, a Hint) when application ``name``'s
    replicas can never be placed on the cluster this process is connected to."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    why = refusal(name, asked(options.get("ray_actor_options") or {}), replicas(options), nodes)
    if why:
        raise UnplaceableError(f"{why}\nHint: {CHECK_HINT}.")


def missing(requirements: list[str]) -> list[str]:
    """The requirements this node's Python does not already satisfy; the node's torch, TorchServe and Ray are
    never installed again, whatever version a requirement names."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    lacking = []
    for line in requirements:
        try:
            wanted = Requirement(line)
            version = metadata.version(wanted.name)
        except (InvalidRequirement, metadata.PackageNotFoundError):
            lacking.append(line)
            continue
        if wanted.name.lower() not in NODE_OWNED and not wanted.specifier.contains(version, prereleases=True):
            lacking.append(line)
    return lacking


def sized(actor: dict[str, Any], args: dict) -> dict[str, Any]:
    """``actor`` (ray_actor_options) with the application's own ``num_cpus``, ``num_gpus`` and ``memory`` args
    (bytes) where they are given."""
    for key, _ in ASKED:
        if args.get(key) is not None:
            actor[key] = float(args[key]) if key != "memory" else int(args[key])
    return actor


class RequirementsError(RuntimeError):
    """A model's requirements could not be installed on this node."""


def install_once(folder: Path, requirements: list[str]) -> Path | None:
    """Install what this node lacks of ``requirements`` into FOLDER's parent/.msnb-requirements/DIGEST once (pip
    ``--target``, the node's replicas taking turns on a lock), and put it first on ``sys.path``; None when nothing
    is lacking. Only the distributions pip would add to this Python are installed (never a second torch)."""
    lacking = missing(requirements)
    if not lacking:
        return None
    digest = hashlib.sha256("\n".join(sorted(lacking)).encode()).hexdigest()[:16]
    target = folder.parent / REQUIREMENTS_DIR / digest
    target.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(target.parent / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".installed").is_file():
            _pip_target(lacking, target)
    sys.path.insert(0, str(target))
    return target


def _pip_target(requirements: list[str], target: Path) -> None:
    """pip's own resolution against this Python (what it would add), then exactly those, without dependencies, into
    ``target``."""
    report = _pip(["install", "--dry-run", "--quiet", "--report", "-", *requirements], requirements)
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in json.loads(report)["install"]]
    owned = [pin for pin in pins if pin.split("==")[0].lower() in NODE_OWNED]
    if owned:
        raise RequirementsError(
            f"{', '.join(requirements)} would install {', '.join(owned)} beside the node's own.\n"
            f"Hint: pin the versions the node has, or leave those requirements out."
        )
    _pip(["install", "--no-deps", "--quiet", "--target", str(target), *pins], requirements)
    (target / ".installed").write_text("\n".join(pins) + "\n")


def _pip(args: list[str], requirements: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RequirementsError(
            f"pip could not install {', '.join(requirements)} on this node: {last}\nHint: {INSTALL_HINT}."
        )
    return done.stdout


WAIT_HINT = (
    "the cluster has room for each replica but not for all of them: free some (serve delete APP), add a node, or ask "
    "for less (`msnb export ... --num-cpus NAME=0.05`; num_cpus in serve_config.yaml); `ray status` shows what is free"
)
WATCH_S = 30.0  # Serve says it once a replica waited 30 s to be scheduled


def waiting(applications: dict) -> list[str]:
    """The applications whose replicas Serve cannot place (``serve.status().applications``), each with Serve's own
    account of what a replica requires and what the cluster has free."""
    found = []
    for name, app in applications.items():
        for deployment in app.deployments.values():
            if "to be scheduled" in (deployment.message or ""):
                found.append(f"{name}: {deployment.message}")
    return found


def watch(logger: Any, stop: Any) -> None:
    """Until ``stop`` (a threading.Event) is set: every WATCH_S seconds, each application whose replicas wait to be
    scheduled is logged once as an error with a Hint (the router's log, which `serve run` prints)."""
    from ray import serve

    said: set[str] = set()
    while not stop.wait(WATCH_S):
        try:
            stalled = waiting(serve.status().applications)
        except Exception:  # the controller restarting: ask again next time
            continue
        for line in stalled:
            if line.split(":")[0] not in said:
                said.add(line.split(":")[0])
                logger.error("msnb: a replica cannot be placed. %s\nHint: %s.", line, WAIT_HINT)
