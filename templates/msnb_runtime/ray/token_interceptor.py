"""What only a Ray Serve application adds to TorchServe's checks (msnb_runtime.ts.checks): where the router's inference key
comes from (a variable, a mounted file, an argument), and Serve's inter-deployment gRPC server on loopback.

Depends on the standard library (and ``ray`` once a replica binds its gRPC server), never on msnb.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..ts.checks import read_key

# The notebook's Ray sets it to 127.0.0.1 on every node: Serve's replicas then bind their gRPC server there.
GRPC_HOST_VAR = "MSNB_RAY_GRPC_HOST"
KEY_VAR, KEY_FILE_VAR = "MSNB_INFERENCE_KEY", "MSNB_INFERENCE_KEY_FILE"
KEY_HINT = (
    f"give the router an inference key: the environment variable {KEY_VAR}, a file named by {KEY_FILE_VAR} or "
    "the router's key_file argument (a mounted secret); or turn the check off explicitly with auth: false"
)


class KeyMissingError(RuntimeError):
    """The router was asked to check an inference key and none was given."""


def bind_replica_grpc(host: str | None = None) -> None:
    """Bind Serve's inter-deployment gRPC server to ``host`` (default: ``$MSNB_RAY_GRPC_HOST``; unset: Ray's own
    ``[::]:0``). Ray 2.60 hard-codes ``[::]:0`` (ray/serve/_private/replica.py) and binds it after the
    deployment's module is imported, so replacing the helper it calls here is enough."""
    host = host or os.environ.get(GRPC_HOST_VAR)
    if not host:
        return
    from ray.serve._private import replica

    original = replica.add_port_to_grpc_server
    if getattr(original, "msnb_host", None) == host:
        return

    def add_port(server: Any, address: str) -> int:
        return original(server, f"{host}:0" if address == "[::]:0" else address)

    add_port.msnb_host = host
    replica.add_port_to_grpc_server = add_port


def inference_key(args: dict) -> str | None:
    """The key requests must carry (``Authorization: Bearer KEY``), None when ``args`` says ``auth: false``.

    From, in order: ``args["key_file"]``, ``$MSNB_INFERENCE_KEY_FILE`` (a file holding the key, or TorchServe's
    key_file.json whose ``inference`` key is used), ``$MSNB_INFERENCE_KEY``. None of them: ``KeyMissingError``."""
    if args.get("auth") is False or str(args.get("auth")).lower() == "false":
        return None
    path = args.get("key_file") or os.environ.get(KEY_FILE_VAR)
    key = read_key(Path(path)) if path else os.environ.get(KEY_VAR, "").strip()
    if not key:
        raise KeyMissingError(f"The msnb router has no inference key. Hint: {KEY_HINT}.")
    return key
