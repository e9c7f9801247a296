"""`msnb serve PATH... [--engine KIND]`: archives served on a local engine of the registry until Ctrl-C.

One routine for every engine (``msnb.engines.registry``): the engine a terminal command starts
(``EngineKind.command``), every archive deployed (each that loads serves; each that does not is reported with its
log lines), the state file `msnb predict` finds, the addresses, Ctrl-C. What differs is the engine's own and declared
by it: whether an archive enters it as it is (TorchServe takes a .mar) or opened into a model folder first
(``deploy_archives``: Ray, msnb.cli.serve_archives), and whether it takes TorchServe's start options (``start_options``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from msnb.cli import serve_state
from msnb.cli.serve_archives import deploy_archives, opener, started_models, ts_options
from msnb.engines import env_vars, registry
from msnb.engines.protocol import Engine, EngineKind, ServeOptions, StartOptions
from msnb.errors import MsnbError, OptionError, ServerError


def serve(args: argparse.Namespace, archives: list[Path], wait: Callable[[Engine], bool]) -> int:
    """Start the engine ``args.engine`` names, serve ``archives`` on it, ``wait(engine)`` (False: the engine ended by
    itself, an error) and stop; 0, or a ServerError when none of them serves."""
    kind = registry.get(args.engine)
    kind.require()
    ts = ts_options(args, kind)  # TorchServe's start options, where the engine takes them
    env = env_vars.resolve(args.env, "the served models")  # a missing variable is refused before anything starts
    packing = {"models_per_replica": args.models_per_replica, "own_replica": tuple(args.own_replica or ())}
    packing["loaded_per_replica"] = args.loaded_per_replica
    engine = command(kind, ServeOptions(args.max_request_size, args.max_response_size, args.envelope, ts, **packing))
    print(f"starting {engine.label} (workdir {engine.workdir}) ...", flush=True)
    engine.start()
    written = api = None
    try:
        api = kind.start_options(engine, ts, opener(ts)) if ts is not None else None
        names = served_models(kind, engine, api, archives, env, args.envelope)
        written = serve_state.write(record(engine, names, api), args.state)
        say_where(engine, api, written)
        if not wait(engine):
            raise ServerError(
                f"{engine.label} exited by itself.",
                "read its last log lines below; run `msnb serve` again.",
                details=engine.log_tail(),
            )
    finally:
        if written is not None:
            written.unlink(missing_ok=True)
        if api is not None:
            api.stop()
        engine.stop()
        print(f"{engine.label} stopped", flush=True)
    return 0


def command(kind: EngineKind, options: ServeOptions) -> Engine:
    """The engine `msnb serve` starts; an OptionError for an engine that serves from a notebook only."""
    if kind.command is None:
        raise OptionError(
            f"{kind.label} has no terminal command.",
            f"serve on it from a notebook: %ms_serve NAME --engine {kind.kind}.",
        )
    return kind.command(options)


def served_models(
    kind: EngineKind, engine: Engine, api: StartOptions | None, archives: list[Path], env: dict, envelope
) -> list[str]:
    """The archives served, as the engine takes them: registered as TorchServe registers its start models (``api``:
    TorchServe's start options), opened into model folders and deployed side by side, or registered as they are."""
    if api is not None:
        return started_models(engine, api, archives, envelope, env)
    if kind.deploy_archives is not None:
        return deploy_archives(engine, archives, envelope, env)
    return register_each(engine, archives, env)


def register_each(engine: Engine, archives: list[Path], env: dict[str, str]) -> list[str]:
    """Register every archive that loads, its workers given ``env`` (--env), and report each that does not (with its
    worker log lines); only when none loads is it an error. Returns the names served."""
    served: list[str] = []
    for path in archives:
        try:
            env_vars.give(engine, path, env)
        except MsnbError as err:
            serve_state.report(path, err)
            continue
        for name, outcome in engine.deploy_many([(path, {})]):
            if isinstance(outcome, MsnbError):
                serve_state.report(path, outcome)
                continue
            served.append(name)
            print(f"serving {name} {outcome.version}: POST {engine.inference_url}/predictions/{name}", flush=True)
    hint = "fix the handler named in the worker log lines, export it again and rerun `msnb serve`."
    return serve_state.served_or_fail(served, len(archives), "", hint)


def say_where(engine: Engine, api: StartOptions | None, state: Path) -> None:
    """The addresses (those the state file holds), the key, and how to ask."""
    where = addresses(engine, api)
    shown = f"management {where['management']}  metrics {where['metrics']}" if where["management"] else ""
    print(f"inference {where['inference']}  {shown or '(no management API)'}")
    print(f"openai {where['openai']}  mcp {where['mcp']}  (the same key)")
    if api is not None and api.hosts_note:
        print(api.hosts_note)
    print(f"token: Authorization: Bearer <inference key in {engine.key_file}>")
    print(f"try:   msnb predict NAME --data '<json>'   (state file {state})\nCtrl-C stops {engine.label}.", flush=True)


def addresses(engine: Engine, api: StartOptions | None = None) -> dict[str, str]:
    """Every address `msnb serve` prints: inference, management and metrics (TorchServe's own, or its start options'
    on Ray; empty without them), OpenAI's base URL and MCP's endpoint."""
    apis = api or engine  # TorchServe's own management and metrics APIs, or its start options' on Ray
    management = apis.management_url or ""
    return {
        "inference": engine.inference_url,
        "management": management,
        "metrics": (apis.metrics_url or "") if management else "",
        "openai": engine.openai_base_url,
        "mcp": engine.mcp_url,
    }


def record(engine: Engine, names: list[str], api: StartOptions | None = None) -> serve_state.ServerRecord:
    """What `msnb predict` (and any tool) reads of this serve: its process, every address it prints, key file and
    models."""
    where = addresses(engine, api)
    return serve_state.ServerRecord(
        os.getpid(),
        str(Path.cwd().resolve()),
        where["inference"],
        where["management"],
        str(engine.key_file),
        names,
        engine.kind,
        metrics_url=where["metrics"],
        openai_url=where["openai"],
        mcp_url=where["mcp"],
    )
