"""Reading the event stream in order and in batches: an ordered consumer of our own.

nats-py's ordered consumer passes each message through a `Msg`, its header parser, a queue and a
callback task. On our machines that costs more than decoding the event. Here the connection
(runtime/bus.py, `BoundedClient.tap`) hands the consumer's deliveries over as bytes, straight from
its parser, into a list. `next_batch` takes the whole list at once, so a rebuild or a runner pays
per batch what nats-py pays per message.

It keeps the ordered consumer's guarantees, in the same way:

- **In order, nothing lost.** Each delivery's consumer sequence must follow the last one. If there
  is a gap, or a heartbeat says the consumer sent more than arrived, the consumer is made again
  from the stream sequence after the last delivery kept. What was kept stays in order.
- **Bounded.** Flow control: the server sends no more than its window until it gets an answer.
  The answer goes only once the caller has taken every message that came before the request, so
  an unread backlog stays in the server, not in memory.
- **Self-healing.** If nothing comes for two heartbeats, not even a heartbeat (a NATS restart lost
  the consumer), the consumer is made again.

The consumer is ephemeral, AckNone, held in memory with one copy (what nats-py's ordered consumer
asks for), and created on the stream's bare subject, so a service's NATS user needs no right beyond
what nats-py's ordered consumer needed (contracts/natsauth.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js import api

from runtime.bus import BoundedClient

log = logging.getLogger("jetway.reader")

_STATUS = b"NATS/1.0 "  # a status line (heartbeat, flow control, an error), unlike a message's own `NATS/1.0\r\n`


class Message(NamedTuple):
    """One stored event as delivered: its subject, stream sequence, how many matching events the consumer still
    had after it, when it was stored (nanoseconds since the epoch), its bytes and its raw NATS headers."""

    subject: str
    seq: int
    pending: int
    stored_ns: int
    data: bytes
    headers: bytes | None

    @property
    def stored(self) -> datetime:
        return datetime.fromtimestamp(self.stored_ns / 1_000_000_000.0, UTC)

    def header_map(self) -> dict[str, str]:
        """The message's NATS headers (the producer's trace, its message id), parsed when asked for."""
        return parse_headers(self.headers)


def parse_headers(raw: bytes | None) -> dict[str, str]:
    if not raw:
        return {}
    found: dict[str, str] = {}
    for line in raw.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon:
            found[name.strip().decode()] = value.strip().decode()
    return found


class OrderedReader:
    """One filter (or several) of one stream, from a point on, read in batches (the module's docstring).

    `start()` makes the consumer and says how many events it has to deliver. `next_batch()` waits for at
    least one event, then returns everything that has arrived (up to `limit`). `close()` ends it."""

    def __init__(
        self,
        nc: Client,
        stream: str,
        filters: Sequence[str],
        *,
        start_seq: int | None = None,
        start_time: datetime | None = None,
        last_per_subject: bool = False,
        heartbeat: float = 5.0,
    ) -> None:
        if not isinstance(nc, BoundedClient):
            raise TypeError("OrderedReader reads through runtime.bus.connect's client (BoundedClient)")
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.stream = stream
        self.filters = list(filters)
        self.start_seq = start_seq
        self.start_time = start_time
        self.last_per_subject = last_per_subject
        self.heartbeat = heartbeat
        self.pending = 0  # what the consumer had to deliver when it was made
        self.remade = 0  # times the consumer was made again (a gap, silence, NATS restarted)
        self.consumer = ""  # the current consumer's name (the server's)
        self._sub: Subscription | None = None
        self._buffer: list[Message] = []
        self._wake = asyncio.Event()
        self._cseq = 0  # the current consumer's last delivery (its own sequence)
        self._sseq = 0  # the stream sequence of the last delivery kept, whichever consumer sent it
        self._received = 0  # deliveries kept, over every consumer
        self._taken = 0  # of those, taken by the caller
        self._flow: list[tuple[int, str]] = []  # flow-control requests: (deliveries kept when it came, where to answer)
        self._broken: str | None = None  # why the consumer must be made again

    async def start(self) -> int:
        await self._make()
        return self.pending

    def _config(self) -> api.ConsumerConfig:
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            flow_control=True,
            idle_heartbeat=self.heartbeat,
            mem_storage=True,
            num_replicas=1,
            max_deliver=1,
        )
        if len(self.filters) == 1:
            config.filter_subject = self.filters[0]
        else:
            config.filter_subjects = self.filters
        if self._sseq:  # made again: on from the last event kept
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self._sseq + 1
        elif self.last_per_subject:
            config.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
        elif self.start_seq is not None:
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self.start_seq
        elif self.start_time is not None:
            config.deliver_policy = api.DeliverPolicy.BY_START_TIME
            config.opt_start_time = self.start_time
        else:
            config.deliver_policy = api.DeliverPolicy.ALL
        return config

    async def _make(self) -> None:
        if self._sseq and self.last_per_subject:
            # the last event of each subject cannot be asked for "from here on": the caller reads it all again
            raise ConnectionError(f"reading the last event of each subject of {self.filters} was interrupted: {self._broken}")
        await self._drop()
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)  # no callback: its deliveries go to the tap, never to nats-py's queue
        self._sub = sub
        self._cseq = 0
        self._flow.clear()
        self._broken = None
        self.nc.tap(sub, self._deliver)
        config = self._config()
        config.deliver_subject = inbox
        info = await self.js.add_consumer(self.stream, config)
        self.consumer = info.name
        self.pending = int(info.num_pending or 0)

    async def _drop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            self.nc.untap(sub)
            with contextlib.suppress(Exception):  # the server forgets an ephemeral consumer no one listens to
                await sub.unsubscribe()

    async def close(self) -> None:
        await self._drop()

    @property
    def buffered(self) -> int:
        """Events arrived and not taken yet: what flow control bounds."""
        return len(self._buffer)

    # --- called by the connection's read loop, for each delivery ---------------------------------

    def _deliver(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        try:
            if headers is not None and headers.startswith(_STATUS):
                self._status(reply, headers)
                return
            if self._broken is not None:
                return  # the consumer is being made again from the last event kept
            tokens = reply.split(b".")
            # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>, or with a
            # domain and an account hash after ACK
            at = 0 if len(tokens) == 9 else 2
            cseq = int(tokens[6 + at])
            if cseq != self._cseq + 1:
                self._broken = f"delivery {cseq} after {self._cseq}"
                self._wake.set()
                return
            self._cseq = cseq
            self._sseq = seq = int(tokens[5 + at])
            self._buffer.append(Message(subject.decode(), seq, int(tokens[8 + at]), int(tokens[7 + at]), data, headers))
            self._received += 1
        except Exception as exc:  # never into the connection's read loop
            self._broken = f"an unreadable delivery: {type(exc).__name__}: {exc}"
        self._wake.set()

    def _status(self, reply: bytes, headers: bytes) -> None:
        code = headers[len(_STATUS) : len(_STATUS) + 3]
        if code == b"100" and reply:  # flow control: answered once what came before it is taken
            self._flow.append((self._received, reply.decode()))
        elif code == b"100":  # an idle heartbeat: the consumer's last delivery, and an answer it still waits for
            fields = parse_headers(headers)
            last = fields.get("Nats-Last-Consumer")
            if last is not None and int(last) != self._cseq and self._broken is None:
                self._broken = f"the consumer sent {last} deliveries, {self._cseq} arrived"
            stalled = fields.get("Nats-Consumer-Stalled")
            if stalled:
                self._flow.append((self._received, stalled))
        elif self._broken is None:  # 409: the consumer was deleted, its leader changed
            self._broken = headers.split(b"\r\n", 1)[0].decode(errors="replace")
        self._wake.set()

    # --- the caller's side -----------------------------------------------------------------------

    async def _answer_flow(self) -> None:
        while self._flow and self._flow[0][0] <= self._taken:
            _, reply = self._flow.pop(0)
            await self.nc.publish(reply)

    async def drained(self) -> bool:
        """Whether the consumer has nothing left to send and all it sent has arrived.

        What `start()` counted can go before it is delivered (the watcher purges a deleted resource's history): a
        caller reading to the end asks this when nothing comes, rather than wait for events that are gone (`to_end`)."""
        if self._buffer or self._broken is not None or not self.consumer:
            return False
        try:
            info = await self.js.consumer_info(self.stream, self.consumer)
        except nats.js.errors.NotFoundError:
            self._broken = "the consumer is gone (NATS restarted)"  # made again from the last event kept: not the end
            return False
        except (nats.errors.Error, OSError, TimeoutError):
            return False  # NATS away: the heartbeats' silence makes the consumer again once it is back
        return int(info.num_pending or 0) == 0 and int(info.delivered.consumer_seq or 0) == self._cseq

    async def to_end(self, idle: float = 1.0) -> AsyncIterator[list[Message]]:
        """Batch after batch, until nothing has come for `idle` seconds and the consumer has nothing left to send: for
        a caller reading to an end it counted, which may be purged or aged out before it is delivered."""
        while True:
            batch = await self.next_batch(idle=idle)
            if batch:
                yield batch
            elif await self.drained():
                return

    async def next_batch(self, limit: int = 0, *, idle: float | None = None) -> list[Message]:
        """Wait for at least one event, then take what has arrived (at most `limit`, when given).

        With `idle`, an empty list when nothing has arrived for that long (ask `drained()` then)."""
        deadline = None if idle is None else asyncio.get_running_loop().time() + idle
        while not self._buffer:
            await self._answer_flow()
            if self._broken is not None:
                log.info("consumer of %s made again: %s", self.filters, self._broken)
                self.remade += 1
                await self._make()
                continue
            self._wake.clear()
            silent = asyncio.get_running_loop().time() + 2 * self.heartbeat
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can lose a cancellation that meets the wake-up, and
                # a runner cancelled while its reader waited then never ended (a replica's stop hung the suite)
                async with asyncio.timeout_at(silent if deadline is None else min(silent, deadline)):
                    await self._wake.wait()
            except TimeoutError:
                if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                    return []
                self._broken = f"nothing for {2 * self.heartbeat:g} s, not even a heartbeat"
        if limit and len(self._buffer) > limit:
            batch = self._buffer[:limit]
            del self._buffer[:limit]
        else:
            batch, self._buffer = self._buffer, []
        self._taken += len(batch)
        await self._answer_flow()
        return batch


__all__ = ["Message", "OrderedReader", "parse_headers"]
