"""`msnb shadow`: the shadow front started before a running TorchServe (its candidate a STORE served on a local engine
of the registry, as `msnb serve` serves it, or a server already running), and `msnb shadow status | split | cutover`,
which find the running front through its state file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from msnb.cli import shadow_state
from msnb.engines import registry
from msnb.engines.shadow.mirror import QUEUE
from msnb.engines.shadow.pairs import BODY_LIMIT
from msnb.engines.shadow.sides import CANDIDATE, PRIMARY
from msnb.engines.shadow.traffic import percent
from msnb.errors import OptionError

ACTIONS = ("status", "split", "cutover")
LOG = "shadow-differences.jsonl"
SHADOW_HELP = """Migrate with live traffic. A front on its own loopback address answers every request from the
PRIMARY (your TorchServe: status, headers and bytes as it gave them, streamed answers streamed) and sends a copy to
the CANDIDATE through a bounded queue, never delaying the answer (a copy that cannot go in time is dropped and
counted). Each pair of answers is compared as `msnb compare` compares them (the status, then the body: JSON with
--rtol / --atol for numbers, bytes otherwise); each difference is one JSON line in --log. The candidate is STORE
served on a local Ray Serve started for it (--engine), or a server already running (--candidate URL).

  msnb shadow STORE --primary URL [--primary-token-file KEY_FILE]
  msnb shadow --primary URL --candidate URL [--candidate-token-file KEY_FILE]
  msnb shadow status [--json]          the counts per model, from the running front (its state file)
  msnb shadow split PERCENT            that share of requests answered by the candidate (the primary gets the copy)
  msnb shadow cutover [MODEL ...]      the candidate answers (every model, or those named); the primary shadows it

Clients send the primary's inference key (--primary-token-file) to the front, or the front's own key when the primary
asks for none. /predictions, /explanations, KServe's v1/v2 paths, /v1 and /mcp are mirrored; every other call (ping,
management) goes to the primary only. The front's metrics address serves Prometheus' counters on /metrics."""


def add(sub, add_command, find_archives) -> None:
    """The `shadow` command (``add_command``: main's way to add a documented command; ``find_archives``: how
    `msnb serve` finds the archives of its PATHs)."""
    cmd = add_command(
        sub, "shadow", "answer from your TorchServe, mirror to a candidate, compare, cut over", SHADOW_HELP
    )
    cmd.add_argument("paths", nargs="*", metavar="STORE | status | split PERCENT | cutover [MODEL ...]")
    for role, what in ((PRIMARY, "the TorchServe that answers"), (CANDIDATE, "the server that gets the copies")):
        cmd.add_argument(f"--{role}", metavar="URL", help=f"inference address of {what}, e.g. http://127.0.0.1:8080")
        cmd.add_argument(f"--{role}-token-file", type=Path, metavar="KEY_FILE", help="its key_file.json (or the key)")
        cmd.add_argument(f"--{role}-api", metavar="URL", help="where its /v1 and /mcp are (default: its address)")
    cmd.add_argument(
        "--engine",
        choices=registry.kinds(),
        default=registry.counterpart(registry.reference().kind).kind,
        help="the local engine a STORE candidate is served on (default: %(default)s)",
    )
    cmd.add_argument("--envelope", metavar="NAME", help="TorchServe's service_envelope for a STORE candidate")
    cmd.add_argument("--split", type=float, default=0.0, metavar="PERCENT", help="share answered by the candidate")
    cmd.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for JSON numbers (default exact)")
    cmd.add_argument("--atol", type=float, default=0.0, help="absolute tolerance for JSON numbers (default exact)")
    cmd.add_argument("--log", type=Path, default=Path(LOG), help="the differences file (default: %(default)s)")
    cmd.add_argument("--log-body-limit", type=int, default=BODY_LIMIT, metavar="BYTES", help="bytes of a body kept")
    cmd.add_argument("--cutover-after", type=int, metavar="N", help="cut a model over after N equal answers in a row")
    cmd.add_argument("--state", type=Path, help="the front's state file (default: its own, found by status & co)")
    cmd.add_argument("--host", default="127.0.0.1", help="the front's address (default: %(default)s)")
    cmd.add_argument("--port", type=int, default=0, help="the front's port (default: a free one)")
    cmd.add_argument("--metrics-port", type=int, default=0, help="the metrics address' port (default: a free one)")
    cmd.add_argument("--max-request-size", type=int, metavar="BYTES", help="largest request body (TorchServe's 6.5 MB)")
    cmd.add_argument("--mirror-queue", type=int, default=QUEUE, metavar="N", help="copies waiting at most")
    cmd.add_argument("--json", action="store_true", help="status: print the counts as JSON")
    cmd.set_defaults(run=lambda args: run(args, find_archives))


def run(args: argparse.Namespace, find_archives) -> int:
    if args.paths and args.paths[0] in ACTIONS:
        return action(args.paths[0], args.paths[1:], args)
    from msnb.cli.shadow_start import start

    return start(args, find_archives)


def action(name: str, rest: list[str], args: argparse.Namespace) -> int:
    """`msnb shadow status | split P | cutover [MODEL ...]` on the running front."""
    from msnb.engines.auth import read_keys
    from msnb.engines.shadow import control

    args.usage_errors = True
    record = shadow_state.find(args.state)
    key = read_keys(Path(record.key_file).read_text())["management"]["key"]
    if name == "status":
        shown = control.call(record.metrics_url, key, "GET", control.STATUS)
        print(json.dumps(shown, indent=1) if args.json else control.table(shown))
        return 0
    if name == "split":
        event = control.call(record.metrics_url, key, "POST", control.SPLIT, {"percent": split_share(rest)})
    else:
        event = control.call(record.metrics_url, key, "POST", control.CUTOVER, {"models": rest})
    print(control.describe(event))
    return 0


def split_share(rest: list[str]) -> float:
    try:
        (share,) = rest
        share = float(share)
    except ValueError:
        raise OptionError(
            f"msnb shadow split {' '.join(rest)}: it takes one share.",
            "give the percentage of requests the candidate answers: msnb shadow split 10.",
        ) from None
    return percent(share)
