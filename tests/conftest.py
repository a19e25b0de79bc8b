from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from testbed.cluster.build import CONTROL_PLANE
from testbed.cluster.controlplane import ControlPlane, ControlPlaneError
from testbed.kubeapi import Cluster, RealServer, cluster_for_tests
from tests.support.nats import NatsEndpoint, nats_endpoint

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (the README's test command runs workers in parallel) each worker hands out ports
    from a range of its own below the kernel's ephemeral ones, so two workers never start servers on one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "JETWAY_FREE_PORTS" not in os.environ:
        index, count = int(worker.removeprefix("gw")), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        width = (32000 - 10000) // max(count, 1)
        low = 10000 + index * width
        os.environ["JETWAY_FREE_PORTS"] = f"{low}-{low + width - 1}"


# Tests that load both cores themselves (replicas killed mid-burst, NATS nodes lost, every service as its own
# process): on two cores, beside the node's pods, their waits starve. They go last, once the node is gone.
LAST = (
    "tests/e2e/test_replicas.py",
    "tests/e2e/test_router_replicas.py",
    "tests/kube/test_least_privilege.py",
    "tests/kube/test_processes.py",
    "tests/runtime/test_nats_cluster.py",
    "tests/services/test_projection_churn.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test node is one per machine (its bridge, tables and containers are the host's): its tests run on
    one worker, in order, and first, as the suite's longest stretch (the other worker takes everything else
    meanwhile, and the node stops after its last test: tests/node/conftest.py); the heaviest tests go last."""
    node = [item for item in items if "tests/node/" in item.nodeid]
    for item in node:
        item.add_marker(pytest.mark.xdist_group("node"))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        last = [item for item in items if item.nodeid.startswith(LAST)]
        rest = [item for item in items if "tests/node/" not in item.nodeid and not item.nodeid.startswith(LAST)]
        items[:] = node + rest + last


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsEndpoint]:
    """A fresh JetStream server with its own store, stopped after the test."""
    with nats_endpoint(tmp_path / "nats") as endpoint:
        yield endpoint


@pytest.fixture
def repo_root() -> Path:
    return ROOT


NO_GO = (
    "the real control plane is built from Go modules and this machine has no Go: install Go 1.26+ and run the suite again "
    "(docs/development.md); or set KUBECONFIG to a cluster of your own"
)


@pytest.fixture(scope="session")
def real_server(request: pytest.FixtureRequest) -> Iterator[RealServer]:
    """The real API server for the session: the cluster KUBECONFIG names, else our test control plane, built
    (once per machine, cached) and started. Without Go the tests that need it skip, except under CI, where
    they are required; a failed build or start is a failure, never a skip."""
    if os.environ.get("KUBECONFIG"):
        yield RealServer(os.environ["KUBECONFIG"], owned=False)
        return
    bin_dir = CONTROL_PLANE.for_tests(request, NO_GO)
    try:
        plane = ControlPlane(bin_dir).start()
    except ControlPlaneError as failure:
        pytest.fail(f"the test control plane could not be started: {failure}", pytrace=False)
    try:
        yield RealServer(str(plane.kubeconfig), owned=True)
    finally:
        plane.stop()


@pytest.fixture(params=["emulator", "real"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """Each Kubernetes test runs twice: on the API emulator over real HTTP, and on a real API server
    (the test control plane, or the cluster KUBECONFIG names), in a namespace of its own."""
    server = request.getfixturevalue("real_server") if request.param == "real" else None
    async with cluster_for_tests(server) as found:
        yield found
