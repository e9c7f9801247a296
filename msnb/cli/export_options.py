"""`msnb export`'s options for the other engines' layouts (KServe, Ray Serve) and the Ray replicas' sizes; light to
import, as every `msnb` command builds the parser."""

from __future__ import annotations

import argparse

from msnb.engines.kserve import KSERVE_CONFIG_DIR, KSERVE_STORE_DIR


def add_layout_options(exp: argparse.ArgumentParser) -> None:
    """The other engines' layouts `msnb export` writes beside (or instead of) the archives."""
    exp.add_argument(
        "--kserve",
        metavar="DIR",
        help="also write KServe's TorchServe layout: "
        f"DIR/{KSERVE_STORE_DIR}/<name>.mar and DIR/{KSERVE_CONFIG_DIR}/config.properties (storageUri points at DIR)",
    )
    exp.add_argument(
        "--ray",
        metavar="DIR",
        help="also write a Ray Serve folder: DIR/<name>/ model folders, the adapter and serve_config.yaml "
        '(`serve run serve_config.yaml` from DIR; KubeRay\'s serveConfigV2); needs pip install "msnb[ray]"',
    )
    exp.add_argument(
        "--kserve-python",
        metavar="DIR",
        help="archives only: write a folder KServe's own Python model server serves (no TorchServe frontend): "
        "DIR/<name>/ model folders, kserve_predictor.py (KServe's v1 and v2 protocols) and requirements.txt",
    )
    exp.add_argument(
        "--ray-host",
        metavar="HOST",
        help="the address Ray Serve's HTTP proxy binds in serve_config.yaml (default 127.0.0.1; 0.0.0.0 for a "
        "cluster, behind an authenticating proxy: Serve's HTTP has no authentication)",
    )
    exp.add_argument("--ray-port", metavar="PORT", type=int, help="Ray Serve's HTTP port in serve_config.yaml (8000)")
    for flag, what in (
        ("--num-cpus", "CPUs (default: a small share)"),
        ("--num-gpus", "GPUs (default: 1 where model-config.yaml says deviceType: gpu)"),
        ("--memory", "memory, e.g. 2Gi (default: none reserved)"),
    ):
        exp.add_argument(
            flag,
            metavar="[NAME=]N",
            action="append",
            help=f"with --ray: the {what} each replica of model NAME (no NAME: every model) asks for",
        )


def sizing_of(args: argparse.Namespace):
    """The replicas' sizes the command line asked for (``--num-cpus``, ``--num-gpus``, ``--memory``) and which models
    share one (``--models-per-replica``, ``--own-replica``, ``--loaded-per-replica``)."""
    from msnb.engines import registry

    packing = (args.models_per_replica, args.own_replica, args.loaded_per_replica)
    return registry.ray_serve().layout().sizing(args.num_cpus, args.num_gpus, args.memory, *packing)
