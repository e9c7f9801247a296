"""The Ray tier's fixtures: a real two-node Ray cluster on loopback shared by a module's tests, the kernel's local Ray
shared by the tests that only deploy to it and ask it, and nothing left running after them."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import RAY_GROUP, poll, processes_naming

import msnb.engines.ray.engine
import msnb.engines.ray.shared  # (first: its SharedRay subclasses LocalRay, which some tests stand in for)
import msnb.session.core
from msnb.engines.ray import ROUTER_APP, RayMissingError, require
from msnb.templates.msnb_runtime.ray.token_interceptor import KEY_VAR

try:
    require()  # imports Ray with msnb's environment (loopback addresses stay loopback)
except RayMissingError:
    pytest.skip("the ray extra is not installed", allow_module_level=True)


class TwoNodes:
    """``ray.cluster_utils.Cluster`` with a head and one worker node, each 1 CPU, in a private temp root."""

    def __init__(self, root: Path):
        from ray.cluster_utils import Cluster

        from msnb.engines.ray.nodes import node_args, started

        self.root = root
        head, worker = node_args(root, 1, head=True), node_args(root, 1, head=False)
        for args in (head, worker):  # as `ray start` runs them: `serve run` shows the replicas' output (log monitor)
            args["include_log_monitor"] = True
        head["resources"] = {"msnb_head": 1}
        # the router's inference key in every node's environment, as `MSNB_INFERENCE_KEY=... ray start` gives it
        # (the steps `msnb export --ray` prints); a router given a key_file reads that instead
        self.key = secrets.token_urlsafe(16)
        for args in (head, worker):
            args["env_vars"] = {KEY_VAR: self.key}
        # asked for by what must stay beside the head's HTTP proxy (the node a test never removes)
        self.head_resource = {"msnb_head": 0.01}
        self.metrics_ports = [head["metrics_export_port"], worker["metrics_export_port"]]
        with started(root):
            self.cluster = Cluster(initialize_head=True, head_node_args=head)
            self.worker = self.cluster.add_node(**worker)
        self.address = self.cluster.address

    def shutdown(self) -> None:
        try:
            self.cluster.shutdown()
            poll(lambda: not processes_naming(self.root), 180, "every Ray process of the cluster to end", interval=1)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def two_nodes():
    # Short, under /tmp: Ray's Unix sockets live under the temp root and a socket path holds at most 107 bytes.
    nodes = TwoNodes(Path(tempfile.mkdtemp(prefix="msnbrayc-", dir="/tmp")))
    try:
        yield nodes
    finally:
        nodes.shutdown()


class SharedRay:
    """One kernel-like local Ray (``LocalRay``) for the tests that deploy to it and ask it, started on first use.

    A process connects to one Ray at a time, so the shared one runs only across consecutive tests that use it: it
    stops after the last of them (``pytest_runtest_teardown``), before a test that starts a Ray or a cluster of
    its own. The tests that use it run last, one after another (``pytest_collection_modifyitems``): a run starts it
    once."""

    engine = None

    def get(self) -> msnb.engines.ray.engine.LocalRay:
        if self.engine is None or not self.engine.running:  # (a test that stops it runs after the others)
            self.engine = msnb.engines.ray.engine.LocalRay().start()
        return self.engine

    def stop(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.stop()


_SHARED = SharedRay()
SHARED_FIXTURE = "ray_engine"
STOPPING_FIXTURE = "last_ray_session"


def _shares(item) -> bool:
    return SHARED_FIXTURE in getattr(item, "fixturenames", ())


# One xdist group for the whole tier (helpers.RAY_GROUP, with the benchmark smoke run's own Ray): the tests that share
# the kernel's Ray must run in one process (it starts that Ray once), and the tests that start and end a Ray or a
# cluster of their own must not run beside another Ray (two Ray-heavy tests side by side each ran 3-4 times slower).
HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the node ids
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent == HERE and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))
    # stable: the others keep their order; a test that stops the shared Ray runs after those that use it
    items.sort(key=lambda item: (_shares(item), STOPPING_FIXTURE in getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before the test's own fixtures start anything
def pytest_runtest_setup(item):
    if not _shares(item):
        _SHARED.stop()


@pytest.hookimpl(trylast=True)  # after the test's fixtures (``ray_engine`` deletes its models) are torn down
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or not _shares(nextitem):
        _SHARED.stop()


@pytest.fixture(scope="session")
def shared_ray():
    try:
        yield _SHARED
    finally:
        _SHARED.stop()


@pytest.fixture
def ray_engine(shared_ray):
    """The shared local Ray, left as the test found it: every application the test deployed (a failed one too) is
    deleted after it, the router kept, so each test passes alone and in any order."""
    from ray import serve

    engine = shared_ray.get()
    yield engine
    if not engine.running:  # the test stopped it (``last_ray_session``)
        return
    for name in [m.name for m in engine.models() if engine.sets.status_app(m.name)]:
        engine.unregister(name)  # a model packed into a replica set: the set goes with the last of its members
    names = set(serve.status().applications) - {ROUTER_APP}
    for name in names:  # every replica drains at once (each waits Serve's drain loop, 2 s)
        serve.delete(name, _blocking=False)
    for name in names:
        engine.unregister(name)  # returns once the application is gone


@pytest.fixture
def ray_session(monkeypatch, ray_engine):
    """A fresh session (as ``session``) whose Ray engine is the shared local Ray: ``engine="ray"`` serves there."""
    fresh = msnb.session.core.Session()
    monkeypatch.setattr(msnb.session.core, "_default", fresh)
    monkeypatch.setattr(msnb.engines.ray.engine, "_default", ray_engine)
    return fresh


@pytest.fixture
def last_ray_session(ray_session):
    """``ray_session`` for a test that stops the shared Ray itself (``%ms_stop``): it runs after the tests that use
    it, so the Ray they started is the one it serves on and stops; alone, it starts one."""
    return ray_session
