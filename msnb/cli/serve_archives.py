"""What `msnb serve` (msnb.cli.serve) parses and prints for an engine that opens archives into model folders (Ray
Serve: the engine's ``EngineKind.deploy_archives`` serves them, ``ModelFolder.open`` opens each) and TorchServe's start
options (``--ts-config``, ``--models`` ...), read as TorchServe reads them, for an engine that takes them.
"""

from __future__ import annotations

from pathlib import Path

from msnb.cli import serve_state
from msnb.engines import registry
from msnb.engines.protocol import Engine, StartOptions
from msnb.engines.ts_properties import START_KEYS
from msnb.errors import MsnbError, OptionError

# argparse's names of `torchserve --start`'s options (msnb.cli.main): the TorchServe config's keys but the first two
TS_OPTIONS = ("ts_config", "models", *START_KEYS, "allowed_hosts")  # the last: msnb's own (api.hosts)


def started_models(engine: Engine, api: StartOptions | None, archives: list[Path], envelope, env) -> list[str]:
    """The PATH archives served side by side; with TorchServe's options (``api``), each registered as TorchServe
    registers its start models instead, then those ``load_models`` names (TorchServe starts with none, too)."""
    if api is None:
        return deploy_archives(engine, archives, envelope, env)
    names = []
    for path in archives:
        try:
            names.append(api.register(str(path.resolve())).name)
        except MsnbError as err:
            serve_state.report(path, err)
    names += api.load_models(serve_state.report)
    for name in names:
        print(f"serving {name}: POST {engine.inference_url}/predictions/{name}", flush=True)
    return names


def torchserve_arguments(group) -> None:
    """`torchserve --start`'s options, with TorchServe's meaning (docs/ray-management.md)."""
    group.add_argument("--ts-config", type=Path, metavar="FILE", help="TorchServe's config.properties")
    group.add_argument("--model-store", type=Path, metavar="DIR", help="the model store (model_store)")
    group.add_argument("--models", nargs="+", metavar="MODEL", help="all, NAME=FILE or FILE in the store (load_models)")
    for flag, key in (
        ("--disable-token-auth", "disable_token_authorization"),
        ("--enable-model-api", "enable_model_api"),
    ):
        group.add_argument(flag, action="store_const", const=True, dest=key, help=f"{key}=true")
    group.add_argument(
        "--allowed-host",
        action="append",
        dest="allowed_hosts",
        metavar="HOST",
        help="a host name the addresses off loopback answer besides localhost (allowed_hosts; * for any)",
    )


def replica_set_arguments(group) -> None:
    """How `msnb serve --engine ray` and `msnb export --ray` pack models into shared replicas
    (``EngineKind.models_per_replica``)."""
    sharing = [(k, registry.get(k)) for k in registry.kinds() if registry.get(k).models_per_replica]
    defaults = "; ".join(f"{kind.label} default {kind.models_per_replica}" for _, kind in sharing)
    group.add_argument(
        "--models-per-replica",
        type=int,
        metavar="K",
        help=f"at most K models in one replica process ({defaults}; 1: a replica per model, as before)",
    )
    group.add_argument(
        "--loaded-per-replica",
        type=int,
        metavar="L",
        help="at most L of a replica's models loaded at once (default K); the others load on their first request, "
        "the least recently used evicted",
    )
    group.add_argument("--own-replica", action="append", metavar="NAME", help="model NAME gets a replica of its own")


def ts_options(args, kind=None):
    """TorchServe's start options as its config (--ts-config's file, the others over it), or None when none is given;
    an OptionError when they are given to an engine that does not take them (``kind``: the registry's entry of
    ``args.engine``), or when nothing at all is to be served."""
    from msnb.engines import ts_properties

    given = {key: getattr(args, key, None) for key in TS_OPTIONS}
    if all(value is None for value in given.values()):
        if not args.paths:
            raise OptionError("msnb serve needs a PATH to serve.", "give a .mar, a model folder or a model store.")
        return None
    if (kind or registry.get(args.engine)).start_options is None:
        taking = " or ".join(f"--engine {k}" for k in registry.kinds() if registry.get(k).start_options)
        raise OptionError(
            f"TorchServe's start options are for {taking}.",
            f"add {taking}, or start TorchServe itself with them (torchserve --start ...).",
        )
    config = ts_properties.read(given.pop("ts_config"))  # msnb's --max-request-size too, as on TorchServe's engine
    return config.with_overrides(load_models=given.pop("models"), max_request_size=args.max_request_size, **given)


def opener(ts):
    """How the registry opens an archive: ``ModelFolder.open``, its requirements checked when TorchServe would
    install them (``install_py_dep_per_model``)."""
    from msnb.package.model_folder import ModelFolder

    return lambda path, folder: ModelFolder.open(path, folder, check_requirements=ts.flag("install_py_dep_per_model"))


def deploy_archives(
    engine: Engine, archives: list[Path], envelope: str | None = None, env: dict | None = None
) -> list[str]:
    """Serve the archives on ``engine`` as its kind does (``EngineKind.deploy_archives``: opened into model folders,
    all at once), saying each that serves and reporting each failure on stderr (its message, Hint and the replica's
    log lines); the others serve. Returns the names served."""
    from msnb.package.model_folder import ModelFolder

    served = []
    outcomes = registry.get(engine.kind).deploy_archives(
        engine, archives, ModelFolder.open, serve_state.report, envelope, env
    )
    for name, status in outcomes:
        served.append(name)
        print(f"serving {name} {status.version}: POST {engine.inference_url}/predictions/{name}", flush=True)
    return serve_state.served_or_fail(
        served,
        len(archives),
        f" on {engine.label}",
        f"fix what each error names (its handler's log lines are under it) and rerun `msnb serve --engine {engine.kind}`.",
    )
