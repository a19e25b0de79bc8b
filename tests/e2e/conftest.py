from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack, running_stack


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    """The standalone stack (tests/support/stack.py) on the test's NATS server; a test file may define its own."""
    async with running_stack(nats.url, tmp_path) as running:
        yield running


@pytest.fixture
async def upstreams() -> AsyncIterator[list[FakeOpenAI]]:
    """Upstream servers a test starts (with `serve`); stopped after it."""
    started: list[FakeOpenAI] = []
    yield started
    for upstream in started:
        await upstream.stop()
