from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.openai_upstream import FakeOpenAI


@pytest.fixture
async def upstreams() -> AsyncIterator[list[FakeOpenAI]]:
    """Upstream servers a test starts (with `serve`); stopped after it."""
    started: list[FakeOpenAI] = []
    yield started
    for upstream in started:
        await upstream.stop()
