"""A real two-node Ray cluster on loopback, shared by the module's tests, with nothing left running after it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import poll, processes_naming

import msnb.session.core
from msnb.engines.ray import RayMissingError, require

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
        head["resources"] = {"msnb_head": 1}
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


@pytest.fixture(scope="module")
def ip():
    """IPython's test shell with `%load_ext msnb` done (as the kernel tier's)."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "msnb")
    return shell


@pytest.fixture
def session(monkeypatch):
    """A fresh session for the test, stopped (its engine with it) afterwards."""
    fresh = msnb.session.core.Session()
    monkeypatch.setattr(msnb.session.core, "_default", fresh)
    yield fresh
    fresh.stop()
