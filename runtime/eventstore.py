"""The event store: typed events appended to, and read back from, one JetStream stream.

- `append` guards a facet with the expected last subject sequence (a stale writer gets
  `Conflict`) and de-duplicates retries by `Nats-Msg-Id`; it retries through a NATS restart
  with the same message id, so an append is stored once or reported as failed, never twice.
- `scan`/`read` replay in stream order from the start, a sequence or a time, up to a
  sequence or a time, through an ordered consumer read in batches (runtime/reader.py:
  flow-controlled, self-healing, a batch per network read instead of a callback per event).
- `history` is one resource's events; `latest` the last desired state of every resource of
  a kind (JetStream's last-per-subject delivery).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError

from contracts.events import Envelope, Event, UndecodableEvent, decode, encode, new_envelope
from contracts.subjects import ALL_EVENTS, SPEC, Key, kind_filter
from runtime import telemetry
from runtime.bus import EVENTS_STREAM, check_subject
from runtime.reader import Message, OrderedReader

log = logging.getLogger("jetway.eventstore")

WRONG_LAST_SEQUENCE = 10071
_HEADER_LINE = b"NATS/1.0\r\n"
_HEADER_ALLOWANCE = 512  # message id, expected sequence and trace headers, with room to spare
_LAST = re.compile(r"wrong last sequence: (\d+)")
_TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    # nats-py's name for "no responders" on a JetStream publish: on a cluster, the stream's leader
    # was lost and its followers are electing another (a second or two)
    nats.js.errors.NoStreamResponseError,
    ServiceUnavailableError,
    asyncio.TimeoutError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
)


class Conflict(Exception):
    """The facet moved on since the writer read it: `actual` is its last sequence now."""

    def __init__(self, subject: str, expected: int, actual: int | None) -> None:
        super().__init__(f"{subject}: expected last sequence {expected}, stream has {actual}")
        self.subject = subject
        self.expected = expected
        self.actual = actual


class EventTooLarge(Exception):
    """An event larger than the NATS server takes in one message (its max_payload); nothing was sent."""

    def __init__(self, subject: str, size: int, limit: int) -> None:
        super().__init__(f"{subject}: the event is {size} bytes, more than the {limit} bytes NATS takes in one message")
        self.subject = subject
        self.size = size
        self.limit = limit


class StoreUnavailable(Exception):
    """NATS did not answer in time; nothing is known to be stored."""


@dataclass(frozen=True)
class Undecodable:
    """A stored message no decoder could read, kept in order so readers can report it."""

    seq: int
    subject: str
    reason: str


Item = Envelope | Undecodable


def decode_message(message: Message) -> Item:
    """A delivered event, typed (or why it cannot be)."""
    try:
        return decode(message.data, subject=message.subject, seq=message.seq, stored_at=message.stored)
    except UndecodableEvent as exc:
        return Undecodable(message.seq, message.subject, exc.reason)


class EventStore:
    def __init__(
        self, nc: Client, *, producer: str, stream: str = EVENTS_STREAM, append_timeout: float = 30.0, request_timeout: float = 5.0
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=request_timeout)
        self.producer = producer
        self.stream = stream
        self.append_timeout = append_timeout

    # --- writing ---------------------------------------------------------------------------

    async def append(
        self,
        subject: str,
        event: Event,
        *,
        expected_seq: int | None = None,
        cause: Envelope | None = None,
        msg_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Envelope:
        """Store one event; the stored envelope (with its sequence) comes back.

        `expected_seq` is the facet's last sequence as the writer saw it (0: no event yet).
        """
        envelope = new_envelope(
            subject, event, producer=self.producer, cause=cause, correlation_id=correlation_id, trace=telemetry.current_trace()
        )
        headers = {"Nats-Msg-Id": msg_id or envelope.id, **telemetry.trace_headers(envelope.trace)}
        if expected_seq is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_seq)
        data = encode(envelope)
        # The server refuses (and nats-py raises a bare MaxPayloadError for) a message past its
        # max_payload, which counts the headers too: say what is too large before trying.
        self._check_size(subject, len(data) + len(_HEADER_LINE) + sum(len(k) + len(v) + 4 for k, v in headers.items()) + 2)
        check_subject(subject)
        deadline = time.monotonic() + self.append_timeout
        delay = 0.05
        while True:
            try:
                ack = await self.js.publish(subject, data, stream=self.stream, headers=headers)
            except BadRequestError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
                # JetStream checks the expected sequence before de-duplication: a retry whose
                # first attempt was stored (its ack lost) lands here. It is ours if the facet's
                # last message carries our message id.
                stored = await self._stored_seq_of(subject, headers["Nats-Msg-Id"])
                if stored:
                    return msgspec.structs.replace(envelope, seq=stored)
                found = _LAST.search(exc.description or "")
                raise Conflict(subject, expected_seq or 0, int(found.group(1)) if found else None) from None
            except _TRANSIENT as exc:
                if time.monotonic() + delay > deadline:
                    raise StoreUnavailable(f"could not store {envelope.type} on {subject}: {type(exc).__name__}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            return msgspec.structs.replace(envelope, seq=ack.seq)

    def check_fits(self, subject: str, event: Event) -> None:
        """EventTooLarge now for an event `append` would refuse: a writer of several events checks
        the later ones before storing the first, so nothing is half-written."""
        envelope = new_envelope(subject, event, producer=self.producer, trace=telemetry.current_trace())
        self._check_size(subject, len(encode(envelope)) + _HEADER_ALLOWANCE)

    def _check_size(self, subject: str, size: int) -> None:
        if size > self.nc.max_payload:
            raise EventTooLarge(subject, size, self.nc.max_payload)

    async def _stored_seq_of(self, subject: str, msg_id: str) -> int:
        try:
            msg = await self.js.get_last_msg(self.stream, subject, direct=True)
        except NotFoundError:
            return 0
        return int(msg.seq or 0) if (msg.headers or {}).get("Nats-Msg-Id") == msg_id else 0

    # --- reading ---------------------------------------------------------------------------

    async def last_seq(self, subject: str) -> int:
        """The stream sequence of the subject's last event, 0 when it has none."""
        try:
            msg = await self.js.get_last_msg(self.stream, subject, direct=True)
        except NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def stream_last_seq(self) -> int:
        info = await self.js.stream_info(self.stream)
        return int(info.state.last_seq)

    async def scan(
        self,
        filters: str | Iterable[str],
        on_item: Callable[[Item], None],
        *,
        since_seq: int | None = None,
        since_time: datetime | None = None,
        until_seq: int | None = None,
        until_time: datetime | None = None,
        last_per_subject: bool = False,
        select: Callable[[str], bool] | None = None,
        on_headers: Callable[[int, str, Mapping[str, str]], None] | None = None,
        timeout: float = 120.0,
    ) -> int:
        """Deliver every matching event in stream order to `on_item`; returns the last sequence seen.

        Stops at the stream's end as of the call (events appended meanwhile are left to the
        caller's consumer), or at `until_seq` / `until_time`. `select` drops subjects before
        they are decoded (a caller reading a broad filter for speed, see Runner). `on_headers` hears
        each delivered event's sequence, subject and NATS headers (`jetway events` reads the expected
        sequence there, to tell a trimmed history).
        """
        subjects = [filters] if isinstance(filters, str) else list(filters)
        end = await self.stream_last_seq()
        if until_seq is not None:
            end = min(end, until_seq)
        if end == 0 or (since_seq is not None and since_seq > end):
            return 0
        until_ns = None if until_time is None else int(until_time.timestamp() * 1_000_000_000)
        reader = OrderedReader(
            self.nc, self.stream, subjects, start_seq=since_seq, start_time=since_time, last_per_subject=last_per_subject
        )
        last = 0
        try:
            async with asyncio.timeout(timeout):
                if await reader.start() == 0:
                    return 0
                async for batch in reader.to_end():  # what was counted can go meanwhile (a purge)
                    for message in batch:
                        seq = message.seq
                        if seq > end or (until_ns is not None and message.stored_ns > until_ns):
                            return last
                        if select is None or select(message.subject):
                            if on_headers is not None:
                                on_headers(seq, message.subject, message.header_map())
                            on_item(decode_message(message))  # a fold that raises ends the scan, to the caller
                        last = seq
                        if seq >= end or message.pending == 0:
                            return last
                return last
        finally:
            await reader.close()

    async def read(self, filters: str | Iterable[str] = ALL_EVENTS, **options: object) -> list[Item]:
        items: list[Item] = []
        await self.scan(filters, items.append, **options)  # type: ignore[arg-type]
        return items

    async def history(self, key: Key, **options: object) -> list[Item]:
        """Every event about one resource: its desired state and each service's decisions."""
        return await self.read(key.history_filter(), **options)

    async def latest(self, kind: str, facet: str = SPEC) -> dict[Key, Envelope]:
        """The last event of one facet of every resource of a kind."""
        found: dict[Key, Envelope] = {}

        def keep(item: Item) -> None:
            if isinstance(item, Envelope):
                found[item.key] = item

        await self.scan(kind_filter(kind, facet), keep, last_per_subject=True)
        return found

    async def follow(self, filters: str | Iterable[str] = ALL_EVENTS, *, since_seq: int | None = None) -> AsyncIterator[Item]:
        """Every matching event from `since_seq` on, then new ones as they are stored, until cancelled."""
        subjects = [filters] if isinstance(filters, str) else list(filters)
        reader = OrderedReader(self.nc, self.stream, subjects, start_seq=since_seq)
        try:
            await reader.start()
            while True:
                for message in await reader.next_batch():
                    yield decode_message(message)
        finally:
            await reader.close()


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, (*_TRANSIENT, StoreUnavailable)) or (isinstance(exc, APIError) and exc.code == 503)
