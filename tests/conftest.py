from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.cluster import Cluster, cluster_for_tests
from tests.support.nats import NatsEndpoint, nats_endpoint

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsEndpoint]:
    """A fresh JetStream server with its own store, stopped after the test."""
    with nats_endpoint(tmp_path / "nats") as endpoint:
        yield endpoint


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(params=["emulator", "kubeconfig"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """Each Kubernetes test runs twice: on the API emulator over real HTTP, and on the cluster
    KUBECONFIG names (skipped, saying so, when it names none)."""
    real = request.param == "kubeconfig"
    if real and not os.environ.get("KUBECONFIG"):
        pytest.skip("set KUBECONFIG to run the Kubernetes tests against a real cluster too (docs/cluster.md)")
    async with cluster_for_tests(real=real) as found:
        yield found
