"""Waiting on conditions, never on the clock: poll a predicate until it holds or time runs out."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition",
    shown: Callable[[], Any] | None = None,
) -> Any:
    """The first truthy result of `check` (sync or async); AssertionError with the last value after `timeout`, and what
    `shown()` says then, when given (what the check saw, where its result alone says nothing)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        last = result
        if time.monotonic() >= deadline:
            seen = f"; saw {shown()!r}" if shown is not None else ""
            raise AssertionError(f"{message} not met within {timeout}s (last: {last!r}{seen})")
        await asyncio.sleep(interval)


async def within(awaitable: Awaitable[T], timeout: float = 10.0) -> T:
    return await asyncio.wait_for(awaitable, timeout)


def eventually_sync(check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02, message: str = "condition") -> Any:
    """`eventually` for synchronous code (a module fixture managing a process)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message} not met within {timeout}s (last: {result!r})")
        time.sleep(interval)
