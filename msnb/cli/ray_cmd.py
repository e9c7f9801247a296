"""`msnb ray up|down|status`: the shared local Ray (the registry's ``EngineKind.shared``), started once for every notebook and
`msnb serve --engine ray`, stopped when asked."""

from __future__ import annotations

import argparse

RAY_HELP = """A local Ray that is up before it is asked. `msnb ray up` starts it (loopback, Ray's token auth, an
inference key, msnb's front) in a process of its own that outlives the shell and the kernel; from then on
`%ms_serve NAME --engine ray`, `msnb serve --engine ray` and `msnb compare` serve on it instead of starting their own
Ray, each with an inference key of its own. A kernel that dies has its models taken off; the Ray stays up until
`msnb ray down`. `msnb ray status` says what it serves and what it costs at rest."""


def add(sub, add_command) -> None:
    """The `ray` command and its three actions (``add_command``: main's way to add a documented command)."""
    ray = add_command(sub, "ray", "a shared local Ray, up before it is asked (up, down, status)", RAY_HELP)
    actions = ray.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the shared Ray (nothing when it is up)")
    up.add_argument("--port", type=int, help="the inference port on 127.0.0.1 (default: a free one)")
    actions.add_parser("down", help="stop it: no process, no file left")
    actions.add_parser("status", help="what it serves, for whom, and its processes and memory")
    ray.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from msnb.engines import registry

    registry.ray_serve().shared(args.action, getattr(args, "port", None), lambda line: print(line, flush=True))
    return 0
