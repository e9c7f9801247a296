"""Redeploy steps against a stand-in TorchServe client: a drain either drains or fails loudly; an interrupted
registration is taken back or says what remains; revisions count up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msnb.engines.models import ModelStatus, WorkerStatus
from msnb.engines.store import ModelStore, next_version
from msnb.engines.torchserve import deploy
from msnb.errors import Interrupted, ServerError

OLD = ModelStatus("mlp", "1.0", False, (WorkerStatus("9000", "READY"),), "mlp-v1.0", response_timeout=1)


class StandIn:
    """Answers the calls drain() and register() make, from a script of queue lengths (None: unreachable)."""

    def __init__(self, pending=(0,), barrier=True):
        self.pending, self.barrier_answer, self.calls = list(pending), barrier, []

    def barrier(self, name, version, timeout):
        self.calls.append(("barrier", timeout))
        return self.barrier_answer

    def versions(self, name):
        now = self.pending.pop(0) if len(self.pending) > 1 else self.pending[0]
        if now is None:
            raise ServerError("Cannot reach TorchServe at http://127.0.0.1:1/models: ConnectionError.")
        return [] if now == "gone" else [ModelStatus("mlp", "1.0", False, OLD.workers, pending=now)]


def test_a_drain_returns_once_the_queue_is_empty():
    client = StandIn(pending=(3, 1, 0))
    deploy.drain(client, OLD)
    assert client.calls == [("barrier", 1.0)] and client.pending == [0]


def test_a_version_unregistered_meanwhile_counts_as_drained():
    deploy.drain(StandIn(pending=(2, "gone")), OLD)


def test_a_drain_that_times_out_is_an_error_saying_the_old_version_stays():
    with pytest.raises(ServerError) as err:
        deploy.drain(StandIn(pending=(4,), barrier=False), OLD)
    assert "mlp 1.0 did not drain: 4 requests were still queued after 1 s" in err.value.message
    assert "stays registered and serving" in err.value.message
    assert "server.unregister('mlp', '1.0')" in err.value.hint


def test_an_unreachable_server_is_not_a_drained_one():
    with pytest.raises(ServerError) as err:
        deploy.drain(StandIn(pending=(None,), barrier=False), OLD)
    assert "Cannot reach the server while draining mlp 1.0" in err.value.message
    assert "stays registered" in err.value.message and err.value.hint


class Interrupting:
    """A client whose registration is interrupted (Ctrl-C); unregistering then works or is refused."""

    def __init__(self, refuse: bool):
        self.refuse, self.unregistered = refuse, []

    def versions(self, name):
        return []

    def register(self, url, name, version, **params):
        raise KeyboardInterrupt

    def unregister_version(self, name, version, missing_ok=False):
        if self.refuse:
            raise ServerError("Unregistering mlp 1.0 failed: HTTP 409 model is loading")
        self.unregistered.append(version)


def archive_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "build" / "mlp"
    (folder / "MAR-INF").mkdir(parents=True)
    (folder / "MAR-INF" / "MANIFEST.json").write_text(
        json.dumps({"model": {"modelName": "mlp", "modelVersion": "1.0"}})
    )
    return folder


def test_an_interrupted_registration_is_taken_back(tmp_path):
    client, store = Interrupting(refuse=False), ModelStore(tmp_path / "store")
    with pytest.raises(KeyboardInterrupt):
        deploy.register(client, store, archive_dir(tmp_path))
    assert client.unregistered == ["1.0"] and not any(store.root.iterdir())


def test_an_interrupted_registration_the_server_keeps_says_what_remains(tmp_path):
    store = ModelStore(tmp_path / "store")
    with pytest.raises(Interrupted) as err:
        deploy.register(Interrupting(refuse=True), store, archive_dir(tmp_path))
    assert "the server still holds it" in err.value.message and "HTTP 409" in err.value.message
    assert "server.unregister('mlp', '1.0')" in err.value.hint and not any(store.root.iterdir())


def test_revisions_count_up_and_never_go_back():
    taken: set[str] = set()
    seen = []
    for _ in range(4):  # each redeploy registers the next version, then the old one is unregistered
        version = next_version("1.0", taken)
        seen.append(version)
        taken = {version}
    assert seen == ["1.0", "1.0-r2", "1.0-r3", "1.0-r4"]
    assert next_version("1.0", {"1.0-r12", "1.0-rc1", "2.0"}) == "1.0-r13"
