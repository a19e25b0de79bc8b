"""The feed: what a runner follows on the event stream, and following it in batches.

A runner follows its scope (runtime/runner.py) with feeds of its own, one filter subject each:
every event (`*`), or one partition, plus the global partition every shard folds. Each feed is
read by an ordered consumer of our own (runtime/reader.py), in stream order, from where the
rebuild, or the last batch handled, left it. A replica never shares a consumer with another, so a
replica that lost a partition cannot take deliveries from the one that holds it now.

A consumer that fails (the connection closed under it) is made again from where the feed was,
after a pause. A closed connection that stays closed (the process is going) ends the feed quietly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.client import Client

from contracts.subjects import ALL_EVENTS, GLOBAL, GLOBAL_KINDS, partition_filter
from runtime.bus import EVENTS_STREAM
from runtime.reader import Message, OrderedReader
from runtime.tasks import cancel_and_wait

log = logging.getLogger("jetway.feed")

Delivery = Message  # one event as a feed delivered it: subject, sequence, what the feed still has, time, bytes, headers


@dataclass(frozen=True)
class Feed:
    """What a runner follows: a label (`*` every partition, else the partition) and its one filter subject."""

    label: str
    filter: str


def can_be_global(subject_filter: str) -> bool:
    """Whether a filter of the service's can match an event of the global partition."""
    tokens = subject_filter.split(".")
    if len(tokens) < 3 or tokens[2] not in ("*", ">", GLOBAL):
        return False
    if tokens[2] == ">" or len(tokens) < 4 or tokens[3] in ("*", ">"):
        return True
    return tokens[3] in {k.lower() for k in GLOBAL_KINDS}


def feeds_of(partition: str | None, filters: list[str], everywhere: tuple[str, ...]) -> list[Feed]:
    """A runner's feeds: every event (no partition), else its partition, the global partition when a filter can
    match it, and for the global partition's shard the filters it follows everywhere."""
    if partition is None:
        return [Feed("*", ALL_EVENTS)]
    feeds = [Feed(partition, partition_filter(partition))]
    if partition != GLOBAL and any(can_be_global(f) for f in filters):
        feeds.append(Feed(GLOBAL, partition_filter(GLOBAL)))  # the cluster-wide inputs every shard folds
    if partition == GLOBAL:
        feeds += [Feed(f, f) for f in everywhere]
    return feeds


async def follow(
    nc: Client,
    feed: Feed,
    *,
    since: Callable[[], int],
    handle: Callable[[Feed, list[Delivery]], Awaitable[None]],
    stopping: asyncio.Event,
    batch: int,
    heartbeat: float,
    name: str,
) -> None:
    """Hand the feed's events after `since()` to `handle`, `batch` at most at a time, until `stopping` is set."""
    delay = 0.1
    while not stopping.is_set():
        try:
            await _follow_once(nc, feed, since() + 1, handle, stopping, batch, heartbeat)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if nc.is_closed:
                return
            log.info("following %s failed (%s): subscribing again", feed.filter, exc, extra={"service": name})
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(delay):  # not wait_for: it can lose a cancellation on 3.11
                    await stopping.wait()
            delay = min(delay * 2, 2.0)


async def _follow_once(
    nc: Client,
    feed: Feed,
    start: int,
    handle: Callable[[Feed, list[Delivery]], Awaitable[None]],
    stopping: asyncio.Event,
    batch: int,
    heartbeat: float,
) -> None:
    reader = OrderedReader(nc, EVENTS_STREAM, [feed.filter], start_seq=start, heartbeat=heartbeat)
    stop = asyncio.ensure_future(stopping.wait())
    waiting: asyncio.Future[list[Delivery]] | None = None
    try:
        await reader.start()
        while not stopping.is_set():
            waiting = asyncio.ensure_future(reader.next_batch(batch))
            await asyncio.wait([waiting, stop], return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():  # stopping: the next holder (or the next start) reads on from the stream
                break
            deliveries = waiting.result()
            waiting = None
            await handle(feed, deliveries)
    finally:
        stop.cancel()
        try:
            if waiting is not None:
                await cancel_and_wait(waiting)  # again and again: nats-py can lose a cancellation (runtime/tasks.py)
        finally:
            await reader.close()


__all__ = ["Delivery", "Feed", "can_be_global", "feeds_of", "follow"]
