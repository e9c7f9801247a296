"""Start Ray nodes the way msnb needs them: loopback only, token authentication, a private temp dir, no dashboard.

Used by the kernel's local Ray (``msnb.engines.ray.engine``) and by the two-node test cluster, so both start alike.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msnb.engines.ray import ENV, require
from msnb.engines.ray.deferred import DEFERRED
from msnb.errors import ServerError

LOOPBACK = "127.0.0.1"
AGENT_PORTS = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port", "runtime_env_agent_port")
TOKEN_FILE = "ray_auth_token"  # Ray's token (RAY_AUTH_TOKEN_PATH), mode 0600, in the temp root: gone with it
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
# Modules every Ray process would import for nothing. Importing Ray imports jsonschema's format checkers, which import
# rfc3987_syntax when it is installed (Jupyter's jsonschema[format-nongpl] installs it); it builds a Lark grammar at
# import: 1.7-4.2 s of CPU in each of Ray's Python processes (agents, Serve's controller and proxy, every replica),
# measured with `python -X importtime` on the 2-core machine. Left out, jsonschema only skips its "iri" formats.
SKIPPED_IMPORTS = tuple(DEFERRED)  # (the modules msnb's own process imports on first use: msnb.engines.ray.deferred)
LEAN_DIR = "lean"  # under the temp root: one stub module per skipped import, first on Ray's processes' PYTHONPATH
_outside: dict[str, str | None] = {}  # the auth variables as they were before our first node started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def environment(temp_root: Path) -> dict[str, str]:
    """The variables every Ray process of ours gets: ``RAY_TMPDIR`` keeps Ray's files under ``temp_root``;
    ``RAY_AUTH_MODE=token`` makes every Ray gRPC server (GCS, raylet, core workers, Serve's inter-deployment
    server) and the agents' HTTP servers refuse a caller without the token in ``temp_root``."""
    from msnb.templates.msnb_runtime.ray.token_interceptor import GRPC_HOST_VAR

    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(temp_root / TOKEN_FILE)}
    return {**ENV, "RAY_TMPDIR": str(temp_root), **token, GRPC_HOST_VAR: LOOPBACK}


def write_token(temp_root: Path) -> Path:
    """A fresh random token for one Ray, readable by this user only (kept if it is already there)."""
    path = temp_root / TOKEN_FILE
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    return path


def use_token(temp_root: Path | None) -> None:
    """Point this process's Ray at ``temp_root``'s token (None: put the auth variables back as they were).

    Ray caches its config and the token in C++: both are re-read, config first (Ray's own tests do the same)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    if temp_root is not None:
        for key in AUTH_VARS:
            _outside.setdefault(key, os.environ.get(key))
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over our file
        os.environ.update(environment(temp_root))
    else:
        for key, value in _outside.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _outside.clear()
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def node_args(temp_root: Path, num_cpus: float, head: bool) -> dict[str, Any]:
    """Arguments of one node (``ray.init`` or ``Cluster.add_node``): loopback, fixed agent ports, our temp dir."""
    # No log monitor (it sends the workers' output to a driver: ours set log_to_driver=False, replicas log to files)
    # and no autoscaler monitor (a fixed local cluster): two Python processes fewer to start beside the node's own.
    args: dict[str, Any] = {
        "num_cpus": num_cpus,
        "node_ip_address": LOOPBACK,
        **{p: free_port() for p in AGENT_PORTS},
        "include_log_monitor": False,
    }
    if head:
        args |= {"include_dashboard": False, "temp_dir": str(temp_root / "ray"), "no_monitor": True}
    return args


@contextlib.contextmanager
def started(temp_root: Path) -> Iterator[None]:
    """While nodes start: our environment set (and kept), Ray's temp root made, and the raylet told its agent's HTTP port.

    Ray 2.60 passes the dashboard agent its listen port but not the raylet, which then waits at most 15 s for
    the agent to write the port to a file and aborts when it is late: under load (a busy 2-core machine, the
    agent's imports taking ~30 s) no node starts. With every agent port fixed and passed, nothing waits.
    """
    require()
    from ray._private import services

    (temp_root / "ray").mkdir(parents=True, exist_ok=True)
    lean = write_lean(temp_root)
    write_token(temp_root)
    use_token(temp_root)  # kept: later calls (ray.init(address), shutdown) read them too
    original = services.start_ray_process

    def start(command: list[str], *args: Any, **kwargs: Any) -> Any:
        if command and command[0] == services.RAYLET_EXECUTABLE:
            command = [*command, *_listen_port_flag(command)]
        with _credentials_hidden(), _path_first(lean):  # Ray copies os.environ into each process it starts
            return original(command, *args, **kwargs)

    services.start_ray_process = start
    try:
        yield
    finally:
        services.start_ray_process = original


@contextlib.contextmanager
def _credentials_hidden() -> Iterator[None]:
    """While a Ray process starts: this process's credential-looking variables out of its environment (Ray's own
    token variables stay), so that a replica gets a credential only when its model names it (``--env``)."""
    from msnb.engines.env_vars import credential

    hidden = {k: os.environ.pop(k) for k in list(os.environ) if credential(k) and k not in AUTH_VARS}
    try:
        yield
    finally:
        os.environ.update(hidden)


def write_lean(temp_root: Path) -> Path:
    """The folder of stubs that make each of ``SKIPPED_IMPORTS`` raise ImportError (what its optional users catch)."""
    folder = temp_root / LEAN_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name in SKIPPED_IMPORTS:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} is not imported in msnb\\'s Ray processes')\n")
    return folder


@contextlib.contextmanager
def _path_first(folder: Path) -> Iterator[None]:
    """While a Ray process starts: ``folder`` first on PYTHONPATH (the raylet's workers inherit it)."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(folder), *([before] if before else [])])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _listen_port_flag(raylet_command: list[str]) -> list[str]:
    agent = next((c for c in raylet_command if c.startswith("--dashboard_agent_command=")), "")
    port = next((c.split("=", 1)[1] for c in agent.split() if c.startswith("--listen-port=")), "0")
    return [f"--dashboard_agent_listen_port={port}"] if port not in ("0", "") else []


def _serve_warnings_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def quiet_serve_log() -> None:
    """Keep Serve's INFO lines out of this process's output (a notebook's cells) from now on: they describe Serve's
    own HTTP proxy ("Application 'NAME' is ready at http://127.0.0.1:PORT/..."), whose port is not the one clients
    use (msnb's front holds that); Serve's warnings still show."""
    logging.getLogger("ray.serve").addFilter(_serve_warnings_only)  # the same filter once, however often called


def refuse_taken(port: int, option: str, host: str = LOOPBACK) -> None:
    """A ServerError with a Hint (``option``: how to choose another port) when ``port`` on ``host`` is taken."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to listen on
        try:
            sock.bind((host, port))
        except OSError:
            raise ServerError(f"Port {port} on {host} is already in use.", f"choose another: {option}.") from None


def shutdown(cluster: Any) -> None:
    """Disconnect, then stop every process of the cluster. No ``serve.shutdown()`` first: the ingress is stopped, so no
    request is in flight to drain, and its ``graceful_shutdown`` call on Serve's controller ends by the controller
    killing itself, which Ray reports to this process as "(raylet) Task ServeController.graceful_shutdown failed".
    Disconnected first, this process hears nothing of the processes' end."""
    import ray

    ray.shutdown()
    cluster.shutdown()
