"""The node the tests in this folder run pods on (testbed/cluster/node.py), built and started once per session.

Without what the node needs (root, runc, nftables, buildah, mmdebstrap, Go, ...) the tests skip and name
what is missing; under CI (`CI=true`) they fail instead, as the control plane's tests do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

import pytest

from testbed.cluster.build import CONTROL_PLANE, NODE, go_binary
from testbed.cluster.images import ImageBuildFailed, missing_tools
from testbed.cluster.node import NodeCluster, NodeError, host_leftovers, missing_features, node_cluster
from testbed.registry.build import REGISTRY
from testbed.registry.server import RegistryError

NO_GO = "the test node is built from Go modules and this machine has no Go: install Go 1.26+ and run the suite again (docs/development.md)"


def _missing() -> list[str]:
    missing = missing_features() + [f"{tool} (Debian package {tool})" for tool in missing_tools()]
    if go_binary() is None:
        missing.append("Go 1.26+ (the node's parts are built from Go modules)")
    return missing


@pytest.fixture(scope="package")  # stopped after this folder's last test: the rest of the suite gets the cores back
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """A control plane with one real node (kubelet, containerd, CNI, kube-proxy, CoreDNS) whose pods pull the images
    this run built from the checkout; everything it did to the machine undone after this folder's last test."""
    missing = _missing()
    if missing:
        message = f"the test node needs what this machine lacks: {'; '.join(missing)} (docs/development.md, 'The test node')"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    # one node per machine (its bridge, tables and folder are the host's): a second pytest, or a worker the
    # node's xdist group did not hold, is told so rather than meeting the first node's files
    lock = open("/var/tmp/jetway-node.lock", "w")  # noqa: SIM115 (held while the node runs)
    request.addfinalizer(lock.close)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pytest.fail("the test node is already running in another pytest process on this machine", pytrace=False)
    bins = (CONTROL_PLANE.for_tests(request, NO_GO), NODE.for_tests(request, NO_GO), REGISTRY.for_tests(request, NO_GO))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    logs = tmp_path_factory.mktemp("node")
    with contextlib.ExitStack() as stack:
        try:
            with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                cluster = stack.enter_context(node_cluster(*bins, logs))
        except (NodeError, ImageBuildFailed, RegistryError) as failure:
            pytest.fail(str(failure), pytrace=False)
        yield cluster
    left = host_leftovers()
    assert not left, f"the node left these on the machine: {left}"
