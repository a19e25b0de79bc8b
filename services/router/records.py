"""Routing records (contracts/routing.py) from a router replica into their stream, off the hot path.

A routed request fills in a `Trace` as it is routed and, at its end, appends it to a list with what it was answered
(`add`: one tuple; sampled by a running fraction, so a rate of 0.25 records every fourth request exactly rather than
a random quarter). Nothing else of the record is done per request: `run` builds the records of what was appended
(the prompt's block hashes among them) and publishes them as one MessagePack batch per `FLUSH_SECONDS` (or sooner
once `BATCH_RECORDS` wait) with a core NATS publish that the stream stores: no acknowledgement is awaited on the way.
Built together, a batch's records cost a fraction of what the same work interleaved with requests costs (measured in
docs/router.md: about 14 µs a request when each was built at its request's end, the CPU caches cold for it each time).
A trace holds its request's body until then: at most `BATCH_RECORDS` of them, a quarter second at most.

When NATS is slow or away the built records wait, at most `MAX_BUFFERED`, and what did not fit is counted as dropped,
so a record can be lost, a request never slowed. The stream is bounded by age and bytes (JETWAY_ROUTING_RECORDS_*),
oldest first out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from contracts.routing import BATCH, ROUTING_PREFIX, ROUTING_STREAM, RoutingRecord
from contracts.subjects import encode_token
from runtime import bus
from services.router import policy
from services.router.projection import Member

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


class Trace:
    """What a recorded request's routing saw, filled in by the router as it goes (services/router/app.py)."""

    __slots__ = ("candidates", "choice", "first_at", "prompt", "tokens_in", "tokens_out")

    def __init__(self) -> None:
        self.candidates: list[Member] = []  # the members that could take it (the router's list, not copied)
        self.choice: policy.Choice | None = None
        self.prompt: policy.Prompt | None = None
        self.first_at = 0.0  # loop time of the first streamed bytes (0: not streamed)
        self.tokens_in = self.tokens_out = 0


# a finished request's trace and its answer: (trace, model, member, key name, status, started, ended; loop times)
Traced = tuple[Trace, str, str, str, int, float, float]


class Records:
    """One replica's records on their way to the stream."""

    def __init__(self, nc: Client, router: str, settings: policy.Settings, *, sample: float = 1.0) -> None:
        self.nc = nc
        self.router = router
        self.settings = settings
        self.sample = sample
        self.subject = f"{ROUTING_PREFIX}.{encode_token(router)}"
        self.traced: list[Traced] = []  # finished requests whose records are not built yet
        self.buffer: list[RoutingRecord] = []  # built, not yet published
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

    def add(self, trace: Trace, model: str, member: str, key: str, status: int, started: float, ended: float) -> None:
        """A recorded request's end (loop times): its record is built with the next batch."""
        traced = self.traced
        traced.append((trace, model, member, key, status, started, ended))
        if len(traced) >= BATCH_RECORDS:
            self._full.set()

    def build(self) -> None:
        """The records of the requests traced since the last flush, into the buffer (what does not fit: dropped)."""
        traced, self.traced = self.traced, []
        if not traced:
            return
        room = MAX_BUFFERED - len(self.buffer)
        if len(traced) > room:
            self.dropped += len(traced) - max(room, 0)
            traced = traced[: max(room, 0)]
        # wall-clock time of a loop time: the two clocks move alike over the quarter second a trace waits
        offset = time.time() - asyncio.get_running_loop().time()
        settings, router = self.settings, self.router
        self.buffer += [record(settings, router, offset, entry) for entry in traced]

    async def flush(self) -> None:
        """Build what was traced, then publish what is buffered, in batches; what cannot be published stays for the
        next try."""
        self.build()
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
        """Flush every FLUSH_SECONDS or when a batch is full, until stopped; then once more."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_SECONDS):
                    await self._full.wait()
            self._full.clear()
            await self.flush()
        await self.flush()
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await self.nc.flush(timeout=2)

    def stop(self) -> None:
        self._stopping.set()
        self._full.set()


def record(settings: policy.Settings, router: str, offset: float, traced: Traced) -> RoutingRecord:
    """A traced request's record (`offset`: wall-clock minus loop time)."""
    trace, model, member, key, status, started, ended = traced
    choice, prompt = trace.choice, trace.prompt
    blocks = prompt.hashed(settings) if prompt is not None else []
    # positional, in the fields' order: msgspec takes keywords at about five times the cost
    return RoutingRecord(
        started + offset,  # at
        model,
        status,
        member,
        tuple([m.name for m in trace.candidates]),
        settings.policy,
        choice.reason if choice is not None else "",
        choice.score if choice is not None else 0.0,
        choice.prefix if choice is not None else 0.0,
        tuple(blocks),
        settings.block_chars,
        prompt.session_key if prompt is not None else None,
        key,
        trace.tokens_in,
        trace.tokens_out,
        trace.first_at - started if trace.first_at else None,  # ttft
        ended - started,  # elapsed
        router,
    )
