"""Ending a task for sure.

On Python 3.11, `asyncio.wait_for` returns a result that arrives in the same turn of the loop as a cancellation and
drops the cancellation (python/cpython gh-86296, fixed in 3.12); nats-py waits on every request that way. A task
cancelled at that moment carries on as if it had not been. Under CPU starvation it happened: a shard's stream reader,
cancelled while it made its consumer again, followed its stream on, so its shard never stopped, its replica never gave
its leases up, and the partitions' events waited for a holder that would not come. A cancellation asked again lands
at the task's next wait."""

from __future__ import annotations

import asyncio
from typing import Any

AGAIN_EVERY = 1.0  # seconds a cancelled task may run on before it is cancelled again


async def cancel_and_wait(*tasks: asyncio.Future[Any], again_every: float = AGAIN_EVERY) -> None:
    """Cancel `tasks` (all at once) and return once every one has ended, cancelling those still running again every
    `again_every` seconds. Their outcomes are not raised (the caller stops them; how one ended was reported where it
    failed). A cancellation of the caller meanwhile is raised once they have ended: a task left running is how a stop
    hangs."""
    interrupted = False
    running = [task for task in tasks if not task.done()]
    while running:
        for task in running:
            task.cancel()
        try:
            await asyncio.wait(running, timeout=again_every)
        except asyncio.CancelledError:
            interrupted = True
        running = [task for task in running if not task.done()]
    for task in tasks:
        retrieved(task)
    if interrupted:
        raise asyncio.CancelledError


def retrieved(task: asyncio.Future[Any]) -> None:
    """Mark an ended task's outcome as read, its caller having no use for it: no "exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


__all__ = ["cancel_and_wait", "retrieved"]
