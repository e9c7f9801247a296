"""What an exported Ray Serve application asks of its cluster: which models share a replica (``--models-per-replica``,
``--loaded-per-replica``, ``--own-replica``: msnb.engines.ray.packing's rule, as `msnb serve --engine ray` packs), each
replica's CPUs, GPUs and memory (the export's ``--num-cpus``/``--num-gpus``/``--memory``, else model-config.yaml's
deviceType and workers, else a small CPU share as TorchServe runs many workers on few cores), what the whole
application needs, and the steps that run it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from msnb.engines.ray.packing import DEFAULT_MODELS_PER_REPLICA, Packing
from msnb.errors import OptionError

SIZES = {"num_cpus": "--num-cpus", "num_gpus": "--num-gpus", "memory": "--memory"}
UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "ki": 1024, "mi": 1024**2, "gi": 1024**3}
SIZE_HINT = "give NAME=VALUE for one model or VALUE for every model, e.g. --num-cpus 0.5 --num-cpus mlp=1 --memory 2Gi"


def replica_cpus() -> float:
    """A replica's CPU share unless the export says otherwise: the local engine's, so that what starts in the
    notebook (or on a plain TorchServe of the same cores) starts on a cluster of them."""
    from msnb.engines.ray.engine import REPLICA_CPUS

    return REPLICA_CPUS


@dataclass(frozen=True)
class Sizing:
    """The export's asks per replica (``{arg: {model name, or "" for every model: value}}``) and who shares one: at
    most ``models_per_replica`` models in a replica set, ``loaded_per_replica`` of them loaded at once (None: all),
    ``own_replica`` the models that get a replica of their own (so does a model sized by name)."""

    asks: dict[str, dict[str, float]] = field(default_factory=dict)
    models_per_replica: int = DEFAULT_MODELS_PER_REPLICA
    own_replica: tuple[str, ...] = ()
    loaded_per_replica: int | None = None

    @classmethod
    def parse(
        cls, num_cpus=(), num_gpus=(), memory=(), models_per_replica=None, own_replica=(), loaded_per_replica=None
    ) -> Sizing:
        """From the options' values (each size ``VALUE`` or ``NAME=VALUE``); a bad one is an OptionError with a Hint."""
        given = {"num_cpus": num_cpus or (), "num_gpus": num_gpus or (), "memory": memory or ()}
        asks = {arg: dict(_one(arg, v) for v in values) for arg, values in given.items() if values}
        for flag, count in (("--models-per-replica", models_per_replica), ("--loaded-per-replica", loaded_per_replica)):
            if count is not None and count < 1:
                raise OptionError(
                    f"{flag} {count} is not a number of models.",
                    "give 1 or more (--models-per-replica 1: a replica per model; --own-replica NAME: for one model).",
                )
        k = models_per_replica or DEFAULT_MODELS_PER_REPLICA
        return cls(asks, k, tuple(own_replica or ()), loaded_per_replica)

    def check_names(self, names: list[str]) -> None:
        """Refuse an ask, or an --own-replica, for a model the export does not hold."""
        named = [(SIZES[arg], set(asks) - {""}) for arg, asks in self.asks.items()]
        for flag, given in [*named, ("--own-replica", set(self.own_replica))]:
            unknown = sorted(given - set(names))
            if unknown:
                raise OptionError(
                    f"{flag} names {', '.join(unknown)}, which this export does not hold.",
                    f"name one of {', '.join(sorted(names))}"
                    + (", or give the value alone for every model." if flag in SIZES.values() else "."),
                )

    def packing(self) -> Packing:
        """The rule that places the export's models into replica sets: a model sized by name (its replicas ask for
        what the others' do not) gets a replica of its own, as ``--own-replica`` gives one."""
        sized = {name for asks in self.asks.values() for name in asks if name}
        return Packing(self.models_per_replica, {*self.own_replica, *sized}, self.loaded_per_replica)

    def args_for(self, name: str) -> dict:
        """Application ``name``'s sizing args for serve_config.yaml (num_cpus always, so that it shows)."""
        args = {"num_cpus": replica_cpus()}
        for arg, asks in self.asks.items():
            value = asks.get(name, asks.get(""))
            if value is not None:
                args[arg] = int(value) if arg == "memory" else value
        return args


def _one(arg: str, text: str) -> tuple[str, float]:
    name, _, value = str(text).rpartition("=")
    try:
        number = _memory(value) if arg == "memory" else float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise OptionError(f"{SIZES[arg]} {text!r} is not a size Ray can place.", SIZE_HINT + ".")
    return name, number


def _memory(text: str) -> float:
    """Bytes from "2Gi", "512Mi", "1G" or a plain number of bytes."""
    found = re.fullmatch(r"\s*([0-9.]+)\s*([kmg]i?)?b?\s*", text.lower())
    if not found:
        raise ValueError(text)
    return float(found[1]) * UNITS[found[2] or ""]


def needs(outdir: Path, config: dict) -> list[tuple[str, int, dict[str, float]]]:
    """(application, replicas, one replica's ask) for each model application and replica set of ``config``
    (serve_config.yaml), computed as its builder computes them (ray_app.deployment_options with model-config.yaml's
    deviceType and workers, or a set's multi_model.set_options from its members', then the application's args); a
    set is named with its members."""
    from msnb.templates.msnb_runtime.ray import app as ray_app
    from msnb.templates.msnb_runtime.ray import multi_model, runtime_env
    from msnb.templates.msnb_runtime.ts.model_loader import read_folder

    rows = []
    for app in config["applications"]:
        args = app["args"]
        if "models" in args:  # a replica set
            members = args["models"]
            configs = [read_folder(outdir / m["model_dir"])[1] for m in members]
            options = multi_model.set_options(configs, args)
            name = f"{app['name']} ({', '.join(str(m['app']) for m in members)})"
            rows.append((name, runtime_env.replicas(options), runtime_env.asked(options["ray_actor_options"])))
            continue
        if "model_dir" not in args:  # the router: no CPU of its own
            continue
        _, model_config = read_folder(outdir / args["model_dir"])
        options = ray_app.deployment_options(model_config, [], float(args.get("num_cpus", 1.0)))
        actor = runtime_env.sized(options["ray_actor_options"], args)
        rows.append((app["name"], runtime_env.replicas(options), runtime_env.asked(actor)))
    return rows


def needs_text(rows: list[tuple[str, int, dict[str, float]]]) -> str:
    """What the whole application needs, and each application's part ("mlp 2 x 0.1 CPU", a replica set's with its
    members: "msnb-models-1 (a, b) 1 x 0.1 CPU")."""
    from msnb.templates.msnb_runtime.ray.runtime_env import shown

    total: dict[str, float] = {}
    for _, count, ask in rows:
        for k, v in ask.items():
            total[k] = total.get(k, 0) + count * v
    parts = "; ".join(f"{name} {count} x {shown(ask)}" for name, count, ask in rows)
    whole = shown({k: round(v, 4) for k, v in total.items()})
    return f"The application needs {whole} in all ({parts}; the router 0 CPU)."
