"""`msnb shadow STORE --primary URL` and `msnb shadow --primary URL --candidate URL`: the command line checked, the
primary asked first (a primary that is down is said before anything starts), the candidate started when it is a STORE
(as `msnb serve` serves it, msnb.cli.serve) or asked when it runs already, then the front until Ctrl-C, with the state
file `msnb shadow status | split | cutover` read."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import tempfile
from pathlib import Path

from msnb.cli import serve, shadow_state
from msnb.cli.shadow_state import ShadowRecord
from msnb.engines import registry
from msnb.engines.auth import read_keys, write_key_file
from msnb.engines.protocol import ServeOptions
from msnb.engines.shadow import sides
from msnb.engines.shadow.ingress import Settings, Shadow
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY, KeyFile, Side
from msnb.engines.shadow.traffic import percent
from msnb.errors import OptionError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES

try:  # the faster loop where it is installed (not on Windows)
    from uvloop import run as run_loop
except ImportError:  # pragma: no cover
    from asyncio import run as run_loop

USAGE = "msnb shadow STORE --primary URL, or msnb shadow --primary URL --candidate URL (see msnb shadow --help)."


def start(args: argparse.Namespace, find_archives) -> int:
    """Run the front until Ctrl-C or SIGTERM; 0 when it stopped so."""
    settings = check(args)
    primary = sides.side(PRIMARY, args.primary, args.primary_token_file, args.primary_api)
    args.usage_errors = False  # the command line is right: a server that does not answer is a failure (exit 1)
    sides.probe(primary)  # before anything starts: a primary that is down is the first thing said
    workdir, engine, written = Path(tempfile.mkdtemp(prefix="msnb-shadow-")), None, []
    try:
        candidate, engine = candidate_side(args, find_archives)
        sides.distinct(primary, candidate)
        own = write_key_file(workdir / "key_file.json")  # the control key; the inference key when the primary has none
        shadow = front(primary, candidate, settings, own)
        run_loop(serve_until_stopped(shadow, lambda: written.append(ready(shadow, args, own, engine))))
    finally:
        for path in written:
            path.unlink(missing_ok=True)
        if engine is not None:
            engine.stop()
            say(f"{engine.label} (the candidate) stopped")
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def front(primary: Side, candidate: Side, settings: Settings, own: Path) -> Shadow:
    """The front over the two sides: the primary's key asked of clients (the front's own when it has none)."""
    try:
        return Shadow(
            {PRIMARY: primary, CANDIDATE: candidate},
            settings,
            primary.key or KeyFile(own),
            read_keys(own.read_text())["management"]["key"],
            say,
        )
    except OSError as err:  # the differences file
        raise OptionError(
            f"--log {settings.log}: {err.strerror or err}.",
            "give a file in a folder you can write (default: ./shadow-differences.jsonl).",
        ) from None


def check(args: argparse.Namespace) -> Settings:
    """The front's settings; an OptionError for a command line that cannot run (nothing has started yet)."""
    args.usage_errors = True
    if not args.primary:
        raise OptionError("msnb shadow needs the primary: --primary URL.", USAGE)
    if bool(args.paths) == bool(args.candidate):
        raise OptionError("msnb shadow takes one candidate: a STORE to serve, or --candidate URL.", USAGE)
    if args.candidate_token_file and not args.candidate:
        raise OptionError("--candidate-token-file is the key of a --candidate URL.", USAGE)
    numbers = {"--rtol": args.rtol, "--atol": args.atol, "--log-body-limit": args.log_body_limit}
    for flag, value in numbers.items():
        if value < 0:
            raise OptionError(f"{flag} {value}: it cannot be negative.", "give 0 (exact, the default) or more.")
    for flag, value in {"--cutover-after": args.cutover_after, "--mirror-queue": args.mirror_queue}.items():
        if value is not None and value < 1:
            raise OptionError(f"{flag} {value}: it counts from 1.", f"give {flag} 1 or more.")
    limit = args.max_request_size or DEFAULT_MAX_BYTES
    return Settings(
        args.log.resolve(),
        args.host,
        args.port,
        args.metrics_port,
        limit,
        (args.rtol, args.atol),
        percent(args.split),
        args.cutover_after,
        args.log_body_limit,
        args.mirror_queue,
    )


def candidate_side(args: argparse.Namespace, find_archives) -> tuple[Side, object | None]:
    """The candidate: the server at --candidate (asked with its key), or STORE served on --engine, started here."""
    if args.candidate:
        found = sides.side(CANDIDATE, args.candidate, args.candidate_token_file, args.candidate_api)
        sides.probe(found)
        return found, None
    archives = find_archives(args.paths)
    kind = registry.get(args.engine)
    kind.require()
    engine = serve.command(kind, ServeOptions(args.max_request_size, None, args.envelope))
    say(f"starting {engine.label} for the candidate ...")
    try:
        engine.start()
        say(f"candidate: {engine.label} at {engine.inference_url} (workdir {engine.workdir})")
        serve.served_models(kind, engine, None, archives, {}, args.envelope)
    except BaseException:
        engine.stop()
        raise
    api = engine.openai_base_url.removesuffix("/v1") or engine.inference_url
    key = KeyFile(engine.key_file) if engine.key_file else None
    return Side(CANDIDATE, engine.inference_url, sides.address(api, "the candidate's API"), key), engine


async def serve_until_stopped(shadow: Shadow, ready) -> None:
    """The front listening, ``ready()`` called, until SIGINT or SIGTERM (each with a handler of its own: a shell's
    background job starts with SIGINT ignored)."""
    try:
        await shadow.start()
    except OSError as err:  # a port taken
        settings = shadow.settings
        raise OptionError(
            f"The front cannot listen on {settings.host} (ports {settings.port}, "
            f"{settings.metrics_port}): {err.strerror or err}.",
            "choose other --port and --metrics-port, or leave them out (free ports).",
        ) from None
    stopping, loop = asyncio.Event(), asyncio.get_running_loop()
    for stop in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(stop, stopping.set)
    try:
        ready()
        await stopping.wait()
    finally:
        await shadow.stop()
        say("msnb shadow stopped")


def ready(shadow: Shadow, args: argparse.Namespace, own: Path, engine) -> Path:
    """The state file written, and where everything is said."""
    primary, candidate = shadow.sides[PRIMARY], shadow.sides[CANDIDATE]
    record = ShadowRecord(
        os.getpid(),
        str(Path.cwd().resolve()),
        shadow.url,
        shadow.metrics_url,
        str(own),
        primary.url,
        candidate.url,
        str(shadow.log.path),
    )
    written = shadow_state.write(record, args.state)
    key = f"the primary's inference key (in {primary.key.path})" if primary.key else f"the inference key in {own}"
    on = f" ({engine.label}, started for it)" if engine is not None else ""
    say(
        f"shadow front {shadow.url}: answers from the primary {primary.url}, copies to the candidate "
        f"{candidate.url}{on}"
    )
    say(f"token: Authorization: Bearer <{key}>")
    say(f"metrics {shadow.metrics_url}/metrics  differences {shadow.log.path}  (state file {written})")
    say("try:   msnb shadow status   msnb shadow split PERCENT   msnb shadow cutover\nCtrl-C stops the front.")
    return written


def say(line: str) -> None:
    print(line, flush=True)
