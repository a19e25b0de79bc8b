"""The event store: typed events appended to, and read back from, one JetStream stream.

- `append` guards a facet with the expected last subject sequence (a stale writer gets
  `Conflict`) and de-duplicates retries by `Nats-Msg-Id`; it retries through a NATS restart
  with the same message id, so an append is stored once or reported as failed, never twice.
- `scan`/`read` replay in stream order from the start, a sequence or a time, up to a
  sequence or a time, through an ordered consumer (flow-controlled, self-healing).
- `history` is one resource's events; `latest` the last desired state of every resource of
  a kind (JetStream's last-per-subject delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError

from contracts.events import Envelope, Event, UndecodableEvent, decode, encode, new_envelope
from contracts.subjects import ALL_EVENTS, SPEC, Key, kind_filter
from runtime import telemetry
from runtime.bus import EVENTS_STREAM, check_subject

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


def msg_seq(msg: Msg) -> tuple[int, int, datetime | None]:
    """(stream sequence, messages still pending, stored time) of a delivered message.

    Read from its reply subject directly (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.
    <nanoseconds>.<pending>`, or with a domain and an account hash after `ACK`): nats-py's `Msg.metadata` builds
    a dataclass tree per message, a third of a rebuild's time."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        meta = msg.metadata  # not a form we know: nats-py says (or raises)
        return meta.sequence.stream, meta.num_pending, meta.timestamp
    at = 0 if len(tokens) == 9 else 2
    stored = datetime.fromtimestamp(int(tokens[7 + at]) / 1_000_000_000.0, UTC)
    return int(tokens[5 + at]), int(tokens[8 + at]), stored


def decode_msg(msg: Msg, seq: int | None = None, stored: datetime | None = None) -> Item:
    """The delivered message's event (`seq` and `stored` when the caller read them already)."""
    if seq is None:
        seq, _, stored = msg_seq(msg)
    try:
        return decode(msg.data, subject=msg.subject, seq=seq, stored_at=stored)
    except UndecodableEvent as exc:
        return Undecodable(seq, msg.subject, exc.reason)


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
        config = api.ConsumerConfig(filter_subjects=subjects if len(subjects) > 1 else None)
        if last_per_subject:
            policy = api.DeliverPolicy.LAST_PER_SUBJECT
        elif since_seq is not None:
            policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = since_seq
        elif since_time is not None:
            policy = api.DeliverPolicy.BY_START_TIME
            config.opt_start_time = since_time
        else:
            policy = api.DeliverPolicy.ALL
        done = asyncio.get_running_loop().create_future()
        last = 0
        failure: list[BaseException] = []

        async def deliver(msg: Msg) -> None:
            nonlocal last
            if done.done():
                return
            seq, pending, stored = msg_seq(msg)
            if seq > end or (until_time is not None and stored is not None and stored > until_time):
                done.set_result(None)
                return
            try:
                if select is None or select(msg.subject):
                    if on_headers is not None:
                        on_headers(seq, msg.subject, msg.headers or {})
                    on_item(decode_msg(msg, seq, stored))
            except Exception as exc:  # the fold failed: stop and report it to the caller
                failure.append(exc)
                done.set_result(None)
                return
            last = seq
            if seq >= end or pending == 0:
                done.set_result(None)

        sub = await self.js.subscribe(
            subjects[0], stream=self.stream, cb=deliver, ordered_consumer=True, deliver_policy=policy, config=config
        )
        try:
            info = await sub.consumer_info()
            if info.num_pending == 0 and (info.delivered is None or not info.delivered.consumer_seq):
                return 0
            await asyncio.wait_for(asyncio.shield(done), timeout)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if failure:
            raise failure[0]
        return last

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
        queue: asyncio.Queue[Item] = asyncio.Queue()

        async def deliver(msg: Msg) -> None:
            queue.put_nowait(decode_msg(msg))

        config = api.ConsumerConfig(filter_subjects=subjects if len(subjects) > 1 else None)
        policy = api.DeliverPolicy.ALL
        if since_seq is not None:
            policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = since_seq
        sub = await self.js.subscribe(
            subjects[0], stream=self.stream, cb=deliver, ordered_consumer=True, deliver_policy=policy, config=config
        )
        try:
            while True:
                yield await queue.get()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, (*_TRANSIENT, StoreUnavailable)) or (isinstance(exc, APIError) and exc.code == 503)
