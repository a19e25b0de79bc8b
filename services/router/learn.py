"""Router replicas that remember as one: each learns from the others' routing records where prompts' prefixes
were sent and which member each session is on (docs/router.md, "Replicas that remember as one").

A replica's records (records.py) already say, for every routed request, the prompt's block hashes, the session's
hash and the member. Every replica subscribes to the records' subject and folds the other replicas' batches into
its own memory (`policy.Memory`: the prefix index and the sessions, both LRU-bounded as before), so a
conversation's next turn finds its member whichever replica takes it, about a quarter of a second (one batch)
after the turn before. A replica that starts reads the last `warm_seconds` of the stream first: it is warm
before it has routed anything.

`learn` is the fold (no I/O); `Learner` is the subscription and the start-up read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from contracts.routing import ROUTING_PREFIX, ROUTING_STREAM, RoutingRecord, decode_batch
from runtime.reader import OrderedReader
from services.router import policy
from services.router.projection import Members

log = logging.getLogger("jetway.router.learn")


def learn(records: Iterable[RoutingRecord], members: Members, memory: policy.Memory, settings: policy.Settings) -> int:
    """Fold records of other replicas into `memory`; how many taught something. A record of a member this replica
    does not know (yet, or any more) teaches nothing; nor do blocks cut at another size."""
    taught = 0
    prefixes = settings.policy == policy.PREFIX_CACHE
    for record in records:
        if not record.member:
            continue
        key = next((m.key for m in members.declaring(record.model) if m.name == record.member), None)
        if key is None:
            continue
        if prefixes and record.blocks and record.block_chars == settings.block_chars:
            memory.index.record(record.blocks, key)
            taught += 1
        if record.session is not None:
            memory.sessions.put(record.session, key)
            taught += 1
    return taught


class Learner:
    """One replica's subscription to the others' records, and its start-up read of the recent ones."""

    def __init__(self, nc: Client, own_subject: str, members: Members, memory: policy.Memory, settings: policy.Settings) -> None:
        self.nc = nc
        self.own_subject = own_subject
        self.members = members
        self.memory = memory
        self.settings = settings
        self.learned = 0  # records that taught this replica something (tests and metrics read it)
        self.warmed = asyncio.Event()
        self._sub: Subscription | None = None

    async def start(self, warm_seconds: float) -> None:
        """Subscribe first (nothing published meanwhile is missed), then read the last `warm_seconds` of the stream."""
        self._sub = await self.nc.subscribe(f"{ROUTING_PREFIX}.>", cb=self._heard)
        try:
            if warm_seconds > 0:
                await self._warm(warm_seconds)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("routing memory: the recent records could not be read (%s); learning from new ones only", type(exc).__name__)
        finally:
            self.warmed.set()

    async def _heard(self, message: Msg) -> None:
        if message.subject == self.own_subject:
            return  # its own: already in its memory
        try:
            records = decode_batch(message.data)
        except msgspec.DecodeError:
            return
        self.learned += learn(records, self.members, self.memory, self.settings)

    async def _warm(self, seconds: float) -> None:
        js = self.nc.jetstream(timeout=10)
        try:
            end = (await js.stream_info(ROUTING_STREAM)).state.last_seq
        except nats.js.errors.NotFoundError:
            return
        if not end:
            return
        reader = OrderedReader(self.nc, ROUTING_STREAM, [f"{ROUTING_PREFIX}.>"], start_time=datetime.now(UTC) - timedelta(seconds=seconds))
        try:
            async with asyncio.timeout(60):
                if await reader.start() == 0:
                    return
                while True:
                    for message in await reader.next_batch():
                        if message.seq > end:
                            return
                        with contextlib.suppress(msgspec.DecodeError):
                            self.learned += learn(decode_batch(message.data), self.members, self.memory, self.settings)
                        if message.seq >= end or message.pending == 0:
                            return
        finally:
            await reader.close()

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
