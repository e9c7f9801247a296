"""Stateful sequences on Ray Serve: every request of one ``ts_request_sequence_id`` goes to the same replica.

TorchServe keeps a sequence on one worker (``sequenceBatching: true`` in model-config.yaml), whose handler keeps the
sequence's state in memory. ``SequenceRouter`` is a Ray Serve request router (``RequestRouterConfig``) for such a
model's deployment: a request carrying the header is sent to the replica that rendezvous hashing picks for its id
among the running replicas (no table to share between routers, and a replica leaving moves only its own sequences);
a request without one goes to the less busy of two random replicas, as Serve's default router does. The router
matches each chosen replica to its own request (``RequestRouter``'s exact matching), so a busy replica makes the
sequence wait for it instead of sending it elsewhere. Depends on ray[serve] and the standard library, never on msnb.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

SEQUENCE_HEADER = "ts_request_sequence_id"  # TorchServe's (msnb_runtime.ts.context.Context.header_key_sequence_id)


def sequence_of(request: PendingRequest | None) -> str | None:
    """The request's sequence id: the header in the headers dict the router passes to the replica's method."""
    if request is None:
        return None
    for value in [*request.args, *request.kwargs.values()]:
        if isinstance(value, dict) and value.get(SEQUENCE_HEADER):
            return str(value[SEQUENCE_HEADER])
    return None


def replica_for(sequence: str, replicas: list[Any], key: Any = lambda r: r.replica_id.unique_id) -> Any:
    """The replica a sequence belongs to (rendezvous hashing: the highest hash of sequence and replica id)."""
    return max(replicas, key=lambda r: hashlib.sha256(f"{sequence}\0{key(r)}".encode()).digest())


class SequenceRouter(RequestRouter):
    """Ray Serve's request router for a stateful model (see the module docstring)."""

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        sequence = sequence_of(pending_request)
        if sequence is not None:
            return [[replica_for(sequence, candidate_replicas)]]
        return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
