from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from runtime.bus import connect, ensure_streams
from tests.support.nats import NatsEndpoint


@pytest.fixture
async def client(nats: NatsEndpoint) -> AsyncIterator[Client]:
    """A connection to the test's JetStream server, its streams made."""
    nc = await connect(nats.url, name="test")
    await ensure_streams(nc.jetstream())
    yield nc
    await nc.close()
