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


async def cancel_and_wait(task: asyncio.Future[Any], *, again_every: float = AGAIN_EVERY) -> None:
    """Cancel `task` and return once it has ended, cancelling it again every `again_every` seconds while it runs on.
    Its outcome is not raised (the caller stops it; how it ended was reported where it failed). A cancellation of the
    caller meanwhile is raised once `task` has ended: a task left running is how a stop hangs."""
    interrupted = False
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait([task], timeout=again_every)
        except asyncio.CancelledError:
            interrupted = True
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at exit
    if interrupted:
        raise asyncio.CancelledError


__all__ = ["cancel_and_wait"]
