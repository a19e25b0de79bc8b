from __future__ import annotations

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


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """The Kubernetes API emulator over real HTTP; a real cluster instead when KUBECONFIG is set."""
    async with cluster_for_tests() as found:
        yield found
