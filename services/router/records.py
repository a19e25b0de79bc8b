"""Routing records (contracts/routing.py) from a router replica into their stream, off the hot path.

A routed request's record is made when it is admitted and filled in as it is routed (`Record`: RoutingRecord's
fields, in its order, in a list, so that MessagePack encodes the two alike), then appended to a buffer (`add`); sampled by a
running fraction, so a rate of 0.25 records every fourth request exactly rather than a random quarter. `run`
publishes the buffer as one MessagePack batch per `FLUSH_SECONDS` (or sooner once it holds `BATCH_RECORDS`) with a
core NATS publish that the stream stores: no acknowledgement is awaited on the way. When NATS is slow or away the
buffer keeps at most `MAX_BUFFERED` records and counts what it dropped, so a record can be lost, a request never
slowed. The stream is bounded by age and bytes (JETWAY_ROUTING_RECORDS_*), oldest first out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from contracts.routing import BATCH, ROUTING_PREFIX, ROUTING_STREAM, RoutingRecord
from contracts.subjects import encode_token
from runtime import bus
from services.router.policy import Settings

log = logging.getLogger("jetway.router.records")

FLUSH_SECONDS = 0.25
BATCH_RECORDS = 512
MAX_BUFFERED = 65_536


def stream_config(max_age: float, max_bytes: int, replicas: int) -> StreamConfig:
    return StreamConfig(
        name=ROUTING_STREAM,
        description="Routing records: why each request went where it went (docs/router.md)",
        subjects=[f"{ROUTING_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_age=max_age,
        max_bytes=max_bytes,
        discard=DiscardPolicy.OLD,
        allow_direct=True,
    )


async def ensure_stream(js: JetStreamContext, max_age: float, max_bytes: int) -> None:
    """The records' stream, made on first use (three copies where the cluster can place them). An existing one
    keeps its limits: an operator changes them on the stream (`nats stream edit`) or by recreating it."""
    config = stream_config(max_age, max_bytes, 1)
    await bus.ensure_stream(js, config, auto_replicas=True, deadline=asyncio.get_running_loop().time() + 30, update=False)


# A routed request's record as the router fills it in: RoutingRecord's fields, in its order, in a list, each set by its
# index where routing learns it. MessagePack writes a list as it writes the contract's array-like record, and it is
# read back as one; a store at a constant index costs a tenth of a Struct's attribute (docs/router.md).
Record = list[Any]
FIELDS: tuple[str, ...] = RoutingRecord.__struct_fields__
AT, MODEL, STATUS, MEMBER, CANDIDATES, REASON, SCORE, PREFIX, BLOCKS = (
    FIELDS.index(name) for name in ("at", "model", "status", "member", "candidates", "reason", "score", "prefix", "blocks")
)
SESSION, KEY, TOKENS_IN, TOKENS_OUT, TTFT, ELAPSED, PLACER = (
    FIELDS.index(name) for name in ("session", "key", "tokens_in", "tokens_out", "ttft", "elapsed", "placer")
)


def record_defaults(router: str, settings: Settings) -> tuple[Any, ...]:
    """A record's fields after its time and model (which come first), as a request starts: `router`'s name and
    `settings`' policy and block size set, the rest RoutingRecord's defaults. A record is `[at, model, *these]`."""
    started = RoutingRecord(at=0.0, model="", status=0, policy=settings.policy, block_chars=settings.block_chars, router=router)
    return msgspec.structs.astuple(started)[2:]


class Records:
    """One replica's records on their way to the stream."""

    def __init__(self, nc: Client, router: str, *, sample: float = 1.0) -> None:
        self.nc = nc
        self.router = router
        self.sample = sample
        self.every = sample >= 1.0  # every request recorded: `wanted` need not be asked (the default)
        self.subject = f"{ROUTING_PREFIX}.{encode_token(router)}"
        self.buffer: list[Record] = []
        self.settings: Settings | None = None  # the settings `defaults` were made for
        self.defaults: tuple[Any, ...] = ()
        # the wall clock less the loop's: a request's arrival on the loop's clock plus this is its time, without a
        # clock read per record (set again at every flush, so it follows the wall clock's corrections)
        self.wall = time.time() - time.monotonic()
        self.dropped = 0
        self.published = 0
        self._credit = 0.0
        self._full = asyncio.Event()
        self._stopping = asyncio.Event()

    def wanted(self) -> bool:
        """Whether the next request is recorded (the running fraction: `sample` of them, evenly)."""
        self._credit += self.sample
        if self._credit >= 1.0:
            self._credit -= 1.0
            return True
        return False

    def follow(self, settings: Settings) -> None:
        """Records made from now on (`[at, model, *records.defaults]`) carry this replica's name and `settings`' policy
        and block size: three fields no request sets. Asked again only when a router's settings object changes."""
        self.settings = settings
        self.defaults = record_defaults(self.router, settings)

    def add(self, record: Record) -> None:
        buffer = self.buffer
        if len(buffer) >= MAX_BUFFERED:
            self.dropped += 1
            return
        buffer.append(record)
        if len(buffer) >= BATCH_RECORDS:
            self._full.set()

    async def flush(self) -> None:
        """Publish what is buffered, in batches; what cannot be published stays for the next try."""
        while self.buffer:
            batch = self.buffer[:BATCH_RECORDS]
            try:
                await self.nc.publish(self.subject, BATCH.encode(batch))
            except (nats.errors.Error, OSError) as exc:
                log.warning("routing records: %d waiting, not published (%s)", len(self.buffer), type(exc).__name__)
                return
            del self.buffer[: len(batch)]
            self.published += len(batch)

    async def run(self) -> None:
        """Flush every FLUSH_SECONDS or when a batch is full, until stopped; then once more. The quarter second is a
        timer that sets the same event a full batch sets: no timeout cancelling the wait, and raising, four times a
        second."""
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            self.wall = time.time() - loop.time()
            timer = loop.call_later(FLUSH_SECONDS, self._full.set)
            await self._full.wait()
            timer.cancel()
            self._full.clear()
            await self.flush()
        await self.flush()
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await self.nc.flush(timeout=2)

    def stop(self) -> None:
        self._stopping.set()
        self._full.set()
