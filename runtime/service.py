"""The service loop: rebuild from the stream, then fold → reconcile → ack, forever.

Every service is the same shape (see `Service`): it names the subjects it consumes, folds
events into its projection, says which resources an event affects, and reconciles one
resource at a time, level-triggered: `reconcile` reads the projection, decides, and records
decisions through `Effects.emit`. The runner does the rest:

- **Rebuild on start.** Every event the service consumes is folded from the stream (an
  ordered consumer), with no effects, then every known resource is reconciled once; a
  decision already recorded in the stream is not recorded again.
- **A durable consumer per service** (`jetway-<name>`): explicit acks after the effect;
  a failed reconcile is retried with backoff (`nak` with a delay) and, after
  `max_attempts`, the event goes to `jetway.dlq.<name>` with the reason. An event no decoder
  can read goes there at once. The consumer keeps going.
- **One reconcile of a key at a time**, as controller-runtime's workqueue promises: a key
  asked for while it is being reconciled is marked dirty and reconciled once more after,
  however many times it was asked; different keys run concurrently, up to `concurrency`.
- **Exactly-once decisions.** A service's decisions live on its own facet subject, appended
  with the facet's last sequence as the projection knew it when the reconcile began: a
  replayed or redelivered event, a second replica, or a decision made from a view that
  another writer's decision overtook gets a conflict instead of a duplicate, refreshes, and
  reconciles again. Message ids are derived from the decision, so a retried append is
  absorbed by JetStream's de-duplication.
- **Snapshots** (runtime/snapshots.py): every `snapshots.every_events` events or
  `every_seconds`, the projection is stored with the sequence it covers; a start loads it and
  replays only the events after it (a snapshot of another version, or unreadable: from the start).
- NATS restarts are survived (the client reconnects; fetches retry); SIGTERM stops the loop
  after the batch in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from contracts.events import Envelope, Event, UndecodableEvent, decode, type_tag
from contracts.subjects import ALL_EVENTS, DLQ_PREFIX, PREFIX, Key, matcher
from runtime import telemetry
from runtime.bus import DLQ_STREAM, EVENTS_STREAM, StreamSettings, ensure_streams, streams_from_env
from runtime.eventstore import Conflict, EventStore, Item, Undecodable, msg_seq
from runtime.snapshots import Codec, Restored, SnapshotSettings, SnapshotStore, Unusable, settings_from_env

log = logging.getLogger("jetway.service")


class Service:
    """What a service declares; the runner calls these. Subclasses override what they use."""

    name: str = "service"
    consumes: tuple[str, ...] = ()  # subject filters; the service's own facet is added
    resync_interval: float | None = None  # seconds between level-triggered passes over every key

    def fold(self, envelope: Envelope) -> None:
        """Fold one event into the projection. Pure state change, no I/O."""

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        """The resources to reconcile because of this event."""
        return (envelope.key,)

    def keys(self) -> Iterable[Key]:
        """Every resource the projection knows, for start-up and resync passes."""
        return ()

    async def reconcile(self, key: Key, effects: Effects) -> None:
        """Bring one resource to what the projection says it should be."""

    async def alongside(self, runner: Runner) -> None:
        """Duties that run beside the consumer (probes, servers); cancelled on stop."""

    def rebuilt(self) -> None:
        """Called once the projection is rebuilt from the stream, before anything is reconciled."""

    def projection(self) -> Any:
        """What snapshots hold (runtime/snapshots.py): everything `fold` writes, nothing else; by convention
        `self.state` when that is a dataclass or a msgspec Struct. None: not snapshotted (it replays from the start)."""
        state = getattr(self, "state", None)
        return state if (dataclasses.is_dataclass(state) and not isinstance(state, type)) or isinstance(state, msgspec.Struct) else None


@dataclass(frozen=True)
class RunnerSettings:
    batch: int = 64
    fetch_timeout: float = 1.0
    ack_wait: float = 30.0
    max_attempts: int = 5
    backoff: tuple[float, ...] = (0.2, 1.0, 2.0, 5.0, 10.0)
    concurrency: int = 16
    conflict_retries: int = 5
    streams: StreamSettings = field(default_factory=streams_from_env)  # JETWAY_HISTORY_PER_FACET, read once
    snapshots: SnapshotSettings = field(default_factory=settings_from_env)  # JETWAY_SNAPSHOT_*, read once


class Requeue(Exception):
    """Reconcile the key again (the projection was refreshed after a conflict)."""


class Effects:
    """What a reconcile may do; every write goes through here so the runner can keep the projection true."""

    def __init__(self, runner: Runner, cause: Envelope | None) -> None:
        self.runner = runner
        self.cause = cause
        # The reconcile decides from the projection as it is now, so each facet is appended after the
        # sequence it has now (or after this reconcile's own last append to it): a decision of another
        # writer folded in the meantime makes the append conflict, instead of this stale one landing on top.
        self._began = runner.folds
        self._appended: dict[str, int] = {}

    @property
    def store(self) -> EventStore:
        return self.runner.store

    @property
    def level(self) -> bool:
        """A level-triggered pass (start-up or resync), not an event: re-assert everything written."""
        return self.cause is None

    async def emit(self, key: Key, event: Event, *, facet: str | None = None) -> Envelope:
        """Record a decision about `key` on this service's facet (or another facet it owns)."""
        subject = key.subject(facet or self.runner.service.name)
        expected = self._appended.get(subject)
        if expected is None:
            expected = self.runner.seq_before(subject, self._began)
        body = msgspec.json.encode(event)
        msg_id = hashlib.sha256(f"{subject}\0{expected}\0".encode() + body).hexdigest()[:32]
        try:
            envelope = await self.runner.store.append(subject, event, expected_seq=expected, cause=self.cause, msg_id=msg_id)
        except Conflict:
            await self.runner.refresh(subject)
            raise Requeue(str(key)) from None
        self.runner.fold(envelope)
        self._appended[subject] = envelope.seq
        return envelope


class _Run:
    """A key's next reconcile: every request made before it starts joins it."""

    def __init__(self, cause: Envelope | None) -> None:
        self.cause = cause
        self.context = contextvars.copy_context()  # the requester's, so the reconcile's span is its child
        self.done = asyncio.Event()
        self.error: Exception | None = None

    def join(self, cause: Envelope | None) -> None:
        # The latest event is the cause, except that a level-triggered request (no cause) wins: the run
        # must re-assert everything, as the pass that asked for it would have.
        if self.cause is not None:
            self.cause = cause
            self.context = contextvars.copy_context()


def _dedupe(keys: Iterable[Key]) -> list[Key]:
    return list(dict.fromkeys(keys))


class Runner:
    def __init__(self, service: Service, nc: Client, settings: RunnerSettings | None = None) -> None:
        self.service = service
        self.nc = nc
        self.settings = settings or RunnerSettings()
        self.store = EventStore(nc, producer=service.name)
        self.js: JetStreamContext = nc.jetstream(timeout=5)
        self.seen: dict[str, int] = {}  # subject → last folded stream sequence
        self.folds = 0  # events folded so far; an Effects compares it with `_moved` to see what moved since it began
        self._moved: dict[str, tuple[int, int]] = {}  # subject → (`folds` at its last fold, its sequence before that fold)
        self.durable = f"jetway-{service.name}"
        self.ready = asyncio.Event()
        self.lag = 0
        self.passes = 0  # level-triggered passes over every key completed (start-up, resyncs)
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._limit = asyncio.Semaphore(self.settings.concurrency)
        self._queued: dict[Key, _Run] = {}  # key → its next reconcile, not started yet
        self._workers: dict[Key, asyncio.Task[None]] = {}  # key → the task reconciling it, while it has work
        self._tracer = trace.get_tracer("jetway.service")
        # Consumers read every event and match the service's filters here: on nats-server 2.15
        # a consumer with several filter subjects delivers ~50x slower than one with a single
        # filter (docs/event-store.md has the measurements).
        self._wanted = matcher(self.filters)
        # Snapshots: `covered` is the sequence through which every event is folded (in stream order; an
        # `emit` folds its own decision ahead of it, which `seen` remembers), what a snapshot says it holds.
        self.covered = 0
        self.restored: Restored | None = None  # the snapshot this start began from, if any
        self.snapshots_written = 0
        self.gapped = False  # the consumer skipped sequences: this projection is no longer a prefix of the stream
        self.replayed = 0  # events the last rebuild read from the stream (after the snapshot, if one was loaded)
        self._snapshots = SnapshotStore(self.js, service.name) if self.settings.snapshots.enabled else None
        self._codec: Codec | None = None
        self._stream_created = ""
        self._folds_at_snapshot = 0
        self._snapshot_at = time.monotonic()
        self._snapshotting: asyncio.Task[None] | None = None

    @property
    def filters(self) -> list[str]:
        own = f"{PREFIX}.*.*.*.{self.service.name}"
        return list(dict.fromkeys([*self.service.consumes, own]))

    def wants(self, subject: str) -> bool:
        return self._wanted.match(subject) is not None

    # --- folding ---------------------------------------------------------------------------

    def fold(self, envelope: Envelope) -> bool:
        """Fold unless this subject already saw this sequence; whether it was folded."""
        if envelope.seq and envelope.seq <= self.seen.get(envelope.subject, 0):
            return False
        self.service.fold(envelope)
        if envelope.seq:
            self.folds += 1
            self._moved[envelope.subject] = (self.folds, self.seen.get(envelope.subject, 0))
            self.seen[envelope.subject] = envelope.seq
        return True

    def seq_before(self, subject: str, folds: int) -> int:
        """The subject's last folded sequence when `folds` events had been folded. If it moved since, a
        sequence before its last (not always the one it had then): the append's guard refuses either."""
        moved = self._moved.get(subject)
        if moved is not None and moved[0] > folds:
            return moved[1]
        return self.seen.get(subject, 0)

    def _fold_item(self, item: Item) -> None:
        if not self.wants(item.subject):
            return
        if isinstance(item, Envelope):
            self.fold(item)
        else:
            log.warning(
                "skipping an unreadable event during rebuild", extra={"seq": item.seq, "subject": item.subject, "reason": item.reason}
            )
            self.seen[item.subject] = max(self.seen.get(item.subject, 0), item.seq)

    async def rebuild(self) -> int:
        started = time.perf_counter()
        since = await self._restore()
        replayed = 0

        def fold_item(item: Item) -> None:
            nonlocal replayed
            replayed += 1
            self._fold_item(item)

        last = max(since, await self.store.scan(ALL_EVENTS, fold_item, select=self.wants, since_seq=since + 1))
        self.covered = last
        # what was replayed counts toward the next snapshot: a long replay is followed by one
        self._folds_at_snapshot, self._snapshot_at = 0, time.monotonic()
        self.replayed = replayed
        if self.restored is not None:
            self.restored.events_since = replayed
        log.info(
            "projection rebuilt",
            extra={
                "service": self.service.name,
                "through_seq": last,
                "from_snapshot_seq": since or None,
                "events_replayed": replayed,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        return last

    # --- snapshots -------------------------------------------------------------------------

    def codec(self) -> Codec | None:
        if self._codec is None and self._snapshots is not None:
            projection = self.service.projection()
            if projection is None:
                self._snapshots = None
                return None
            try:
                self._codec = Codec(projection)
            except TypeError as exc:  # a projection the codec cannot read: the service replays in full, as before
                log.error("snapshots off: %s", exc, extra={"service": self.service.name})
                self._snapshots = None
        return self._codec

    async def _restore(self) -> int:
        """Load the snapshot into the projection; the sequence to replay after (0: from the start)."""
        info = await self.js.stream_info(EVENTS_STREAM)
        self._stream_created = str(info.created or "")
        codec = self.codec()
        if codec is None or self._snapshots is None:
            return 0
        name = self.service.name
        try:
            data = await self._snapshots.get()
            if data is None:
                return 0
            snapshot = codec.header(data)
            if snapshot.stream_created != self._stream_created or snapshot.seq > int(info.state.last_seq):
                raise Unusable(f"taken of another event stream (created {snapshot.stream_created}, through {snapshot.seq})")
            codec.restore(snapshot, self.service.projection())
        except Unusable as exc:
            log.warning("snapshot ignored, replaying from the start: %s", exc, extra={"service": name})
            return 0
        except Exception as exc:  # NATS, a missing chunk: the snapshot only saves time
            log.warning("snapshot not read, replaying from the start: %s: %s", type(exc).__name__, exc, extra={"service": name})
            return 0
        self.seen = dict(snapshot.seen)
        self.restored = Restored(snapshot.seq, dict(snapshot.seen), snapshot.written_at)
        log.info("snapshot loaded", extra={"service": name, "seq": snapshot.seq, "written_at": snapshot.written_at.isoformat()})
        return snapshot.seq

    def _snapshot_due(self) -> bool:
        if self.gapped:
            return False
        since = self.folds - self._folds_at_snapshot
        settings = self.settings.snapshots
        return since >= settings.every_events or (since > 0 and time.monotonic() - self._snapshot_at >= settings.every_seconds)

    def snapshot_now(self) -> asyncio.Task[None] | None:
        """Take a snapshot (synchronously: no fold runs between the state and its sequence) and store it in
        the background; the storing task, or None when snapshots are off or one is being stored."""
        codec = self.codec()
        if codec is None or self._snapshots is None or self.gapped or (self._snapshotting is not None and not self._snapshotting.done()):
            return None
        try:
            data = codec.encode(
                self.service.projection(),
                runner=self.service.name,
                seq=self.covered,
                seen=dict(self.seen),
                stream_created=self._stream_created,
            )
        except Exception as exc:  # a projection holding what must not be stored: no snapshot, said loudly
            log.error("snapshot not taken: %s: %s", type(exc).__name__, exc, extra={"service": self.service.name})
            self._folds_at_snapshot, self._snapshot_at = self.folds, time.monotonic()
            return None
        self._folds_at_snapshot, self._snapshot_at = self.folds, time.monotonic()
        self._snapshotting = asyncio.create_task(self._store_snapshot(data, self.covered), name=f"{self.service.name}-snapshot")
        return self._snapshotting

    async def _store_snapshot(self, data: bytes, seq: int) -> None:
        assert self._snapshots is not None
        started = time.perf_counter()
        try:
            await self._snapshots.put(data)
        except Exception as exc:
            log.warning("snapshot not stored: %s: %s", type(exc).__name__, exc, extra={"service": self.service.name})
            return
        self.snapshots_written += 1
        log.info(
            "snapshot stored",
            extra={"service": self.service.name, "seq": seq, "bytes": len(data), "seconds": round(time.perf_counter() - started, 3)},
        )

    async def _snapshot_timer(self) -> None:
        if self.codec() is None:
            return
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), min(self.settings.snapshots.every_seconds, 60.0))
            if not self._stopping.is_set() and self._snapshot_due():
                self.snapshot_now()

    async def refresh(self, subject: str) -> None:
        """Fold what a conflict says we missed on one subject."""
        await self.store.scan(subject, self._fold_item, since_seq=self.seen.get(subject, 0) + 1)

    # --- reconciling -----------------------------------------------------------------------

    async def reconcile(self, key: Key, cause: Envelope | None = None) -> None:
        """Reconcile `key`, after the reconcile of it in progress if there is one; returns once done.

        One reconcile of a key at a time: a resync pass that began before an event was folded would
        otherwise write after that event's reconcile (an object re-created after its withdrawal). Asked
        while it runs, the key is reconciled once more after, and every request until that run starts
        joins it: a burst of events, a resync and a re-probe cost one reconcile, not one each.
        """
        run = self._queued.get(key)
        if run is None:
            run = self._queued[key] = _Run(cause)
        else:
            run.join(cause)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._work(key), name=f"{self.service.name}-reconcile")
        await run.done.wait()
        if run.error is not None:
            raise run.error

    async def _work(self, key: Key) -> None:
        """Run the key's queued reconciles one after the other until none is left."""
        try:
            while (run := self._queued.pop(key, None)) is not None:
                try:
                    await asyncio.create_task(self._reconcile_now(key, run.cause), context=run.context)
                except Exception as exc:
                    run.error = exc
                except BaseException:
                    run.error = RuntimeError(f"{key}: the runner stopped while reconciling it")
                    raise
                finally:
                    run.done.set()
        finally:
            del self._workers[key]
            left = self._queued.pop(key, None)
            if left is not None:  # stopped with a request still waiting for its turn
                left.error = RuntimeError(f"{key}: the runner stopped before reconciling it")
                left.done.set()

    async def _reconcile_now(self, key: Key, cause: Envelope | None) -> None:
        for _ in range(self.settings.conflict_retries):
            try:
                async with self._limit:
                    await self.service.reconcile(key, Effects(self, cause))
                return
            except Requeue:  # the projection was refreshed: decide again from the fresh view
                continue
        raise RuntimeError(f"{key}: still conflicting after {self.settings.conflict_retries} refreshes")

    async def reconcile_all(self) -> None:
        results = await asyncio.gather(*(self.reconcile(k) for k in _dedupe(self.service.keys())), return_exceptions=True)
        for error in results:
            if isinstance(error, BaseException) and not isinstance(error, asyncio.CancelledError):
                log.warning("reconcile failed: %s", error, extra={"service": self.service.name})
        self.passes += 1

    # --- consuming -------------------------------------------------------------------------

    async def _consumer(self, start_after: int) -> Any:
        config = api.ConsumerConfig(
            durable_name=self.durable,
            filter_subject=ALL_EVENTS,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.settings.ack_wait,
            max_deliver=self.settings.max_attempts + 2,  # a safety net; the runner dead-letters first
            max_ack_pending=1000,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_after + 1,
        )
        try:
            info = await self.js.consumer_info(EVENTS_STREAM, self.durable)
        except nats.js.errors.NotFoundError:
            await self.js.add_consumer(EVENTS_STREAM, config)
        else:
            if info.config.filter_subject != ALL_EVENTS or info.config.filter_subjects or info.config.ack_wait != config.ack_wait:
                # keep the position, change what it delivers
                config.deliver_policy = info.config.deliver_policy
                config.opt_start_seq = info.config.opt_start_seq
                await self.js.add_consumer(EVENTS_STREAM, config)
        return await self.js.pull_subscribe_bind(durable=self.durable, stream=EVENTS_STREAM)

    async def _dead_letter(self, msg: Msg, reason: str, deliveries: int) -> None:
        headers = {
            "Jetway-Dlq-Subject": msg.subject,
            "Jetway-Dlq-Seq": str(msg_seq(msg)[0]),
            "Jetway-Dlq-Reason": reason[:1000],
            "Jetway-Dlq-Deliveries": str(deliveries),
            "Jetway-Dlq-Service": self.service.name,
        }
        await self.js.publish(f"{DLQ_PREFIX}.{self.service.name}", msg.data, stream=DLQ_STREAM, headers=headers)
        telemetry.events_dead_lettered.add(1, {"service": self.service.name})
        log.error("event dead-lettered", extra={"service": self.service.name, "subject": msg.subject, "reason": reason})
        await msg.term()

    async def _held_between(self, first: int, until: int) -> bool:
        """Whether the stream still holds an event at a sequence in [first, until): one another consumer
        of ours was given. When unsure (NATS did not answer), yes: a snapshot is only skipped."""
        try:
            found = await self.js.get_msg(EVENTS_STREAM, seq=first, next=True, subject=ALL_EVENTS, direct=True)
        except Exception:  # any failure reads as "held": the safe side
            return True
        return found.seq is not None and found.seq < until

    async def handle_batch(self, msgs: list[Msg]) -> None:
        started = time.perf_counter()
        pending: list[tuple[Msg, Envelope, list[Key]]] = []  # message, its event, the keys it affects
        for msg in msgs:
            seq, remaining, stored = msg_seq(msg)
            self.lag = remaining
            # The consumer delivers every sequence in order (a redelivery is behind, folded already): once the
            # next one is folded or skipped below, before the next await, everything up to it is.
            # Sequences the stream no longer holds (a facet's history trimmed, runtime/bus.py) are not a gap.
            trimmed = seq > self.covered + 1 and not self.gapped and not await self._held_between(self.covered + 1, seq)
            covered = seq if seq == self.covered + 1 or trimmed else self.covered
            if seq > self.covered + 1 and not trimmed and not self.gapped:
                # A replica sharing the consumer was given the events between: this projection now holds events
                # folded without those before them, which no replay of a snapshot of it would reproduce.
                self.gapped = True
                if self._snapshots is not None:
                    log.warning(
                        "snapshots off until restart: the consumer skipped events (another replica takes them)",
                        extra={"service": self.service.name, "covered": self.covered, "delivered": seq},
                    )
            if not self.wants(msg.subject):
                self.covered = covered
                await msg.ack()
                continue
            deliveries = msg.metadata.num_delivered
            if deliveries > 1:
                telemetry.events_redelivered.add(1, {"service": self.service.name})
            try:
                envelope = decode(msg.data, subject=msg.subject, seq=seq, stored_at=stored)
            except UndecodableEvent as exc:
                self.seen[msg.subject] = max(self.seen.get(msg.subject, 0), seq)
                self.covered = covered
                await self._dead_letter(msg, exc.reason, deliveries)
                continue
            try:
                folded = self.fold(envelope)
                keys = _dedupe(self.service.affected(envelope))
            except Exception as exc:  # a fold that fails on a valid event will fail again: do not retry it
                self.covered = covered
                await self._dead_letter(msg, f"fold failed: {type(exc).__name__}: {exc}", deliveries)
                continue
            self.covered = covered
            if not folded and envelope.producer == self.service.name:
                await msg.ack()  # our own decision, echoed back: nothing new to reconcile
                continue
            pending.append((msg, envelope, keys))
        failures = await self._reconcile_batch(pending)
        for msg, envelope, keys in pending:
            failed = [failures[k] for k in keys if k in failures]
            outcome = "ok"
            if not failed:
                await msg.ack()
            else:
                outcome = "failed"
                deliveries = msg.metadata.num_delivered
                if deliveries >= self.settings.max_attempts:
                    await self._dead_letter(msg, failed[0], deliveries)
                else:
                    delay = self.settings.backoff[min(deliveries - 1, len(self.settings.backoff) - 1)]
                    await msg.nak(delay=delay)
            telemetry.events_handled.add(1, {"service": self.service.name, "type": envelope.type, "outcome": outcome})
        telemetry.handler_duration.record(time.perf_counter() - started, {"service": self.service.name})
        if self._snapshot_due():
            self.snapshot_now()

    async def _reconcile_batch(self, pending: list[tuple[Msg, Envelope, list[Key]]]) -> dict[Key, str]:
        """Reconcile each affected key once (the latest event is its cause); key → error for failures."""
        causes: dict[Key, tuple[Envelope, dict[str, str]]] = {}
        for msg, envelope, keys in pending:
            for key in keys:
                causes[key] = (envelope, msg.headers or {})
        failures: dict[Key, str] = {}

        async def one(key: Key, cause: Envelope, headers: dict[str, str]) -> None:
            # The producer's trace travels in the NATS headers; the envelope keeps a copy for replays.
            carrier = headers if "traceparent" in headers else telemetry.trace_headers(cause.trace)
            parent = telemetry.context_from(carrier)
            with self._tracer.start_as_current_span(
                f"{self.service.name} reconcile",
                context=parent,
                kind=trace.SpanKind.CONSUMER,
                attributes={
                    "jetway.service": self.service.name,
                    "jetway.event.type": type_tag(cause.event),
                    "jetway.event.id": cause.id,
                    "jetway.resource": str(key),
                    "messaging.system": "nats",
                    "messaging.destination.name": cause.subject,
                },
            ) as span:
                try:
                    await self.reconcile(key, cause)
                except Exception as exc:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    failures[key] = f"reconcile failed: {type(exc).__name__}: {exc}"
                    log.warning("reconcile failed", extra={"service": self.service.name, "resource": str(key), "error": str(exc)})

        await asyncio.gather(*(one(k, c, h) for k, (c, h) in causes.items()))
        return failures

    async def _fetch_loop(self, psub: Any) -> None:
        delay = 0.1
        stopping = asyncio.ensure_future(self._stopping.wait())
        while not self._stopping.is_set():
            fetching = asyncio.ensure_future(psub.fetch(self.settings.batch, timeout=self.settings.fetch_timeout))
            await asyncio.wait([fetching, stopping], return_when=asyncio.FIRST_COMPLETED)
            if not fetching.done():  # stopping: whatever this fetch would bring is redelivered later
                fetching.cancel()
                with contextlib.suppress(BaseException):
                    await fetching
                break
            try:
                msgs = fetching.result()
            except (TimeoutError, nats.errors.TimeoutError):
                self.lag = 0
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS restarting, consumer briefly gone: wait and try again
                log.debug("fetch failed: %s", exc, extra={"service": self.service.name})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                if isinstance(exc, nats.js.errors.NotFoundError):
                    psub = await self._consumer(max(self.seen.values(), default=0))
                continue
            delay = 0.1
            await self.handle_batch(msgs)
        stopping.cancel()

    async def _resync(self) -> None:
        interval = self.service.resync_interval
        if not interval:
            return
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
            if not self._stopping.is_set():
                await self.reconcile_all()

    async def run(self) -> None:
        """Rebuild, reconcile what is known, then consume until `stop()`."""
        await ensure_streams(self.js, self.settings.streams)
        last = await self.rebuild()
        self.service.rebuilt()
        if self._snapshot_due():
            self.snapshot_now()
        psub = await self._consumer(last)
        telemetry.register_lag(self.service.name, lambda: self.lag)
        await self.reconcile_all()
        self._tasks = [
            asyncio.create_task(self.service.alongside(self), name=f"{self.service.name}-alongside"),
            asyncio.create_task(self._resync(), name=f"{self.service.name}-resync"),
            asyncio.create_task(self._snapshot_timer(), name=f"{self.service.name}-snapshot-timer"),
        ]
        self.ready.set()
        log.info("service running", extra={"service": self.service.name})
        try:
            await self._fetch_loop(psub)
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            workers = list(self._workers.values())  # reconciles still running for the cancelled duties (a resync pass)
            for task in workers:
                task.cancel()
            for task in workers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._snapshotting is not None:  # a half-stored object would leave its chunks behind: let it finish
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(self._snapshotting), 30)
            with contextlib.suppress(Exception):
                await psub.unsubscribe()
            log.info("service stopped", extra={"service": self.service.name})

    def stop(self) -> None:
        self._stopping.set()


async def run_until_stopped(runners: list[Runner], stop: asyncio.Event, on_ready: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run several services in one process until `stop` is set (SIGTERM, Ctrl-C), then drain.

    A service that fails stops the others: a half-running control plane is worse than none.
    """
    tasks = [asyncio.create_task(r.run(), name=r.service.name) for r in runners]
    waiting = asyncio.create_task(stop.wait())
    try:
        ready = asyncio.create_task(asyncio.wait([asyncio.create_task(r.ready.wait()) for r in runners]))
        await asyncio.wait([ready, waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if ready.done() and not stop.is_set() and not any(t.done() for t in tasks) and on_ready is not None:
            await on_ready()
        await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for runner in runners:
            runner.stop()
        waiting.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


__all__ = ["Effects", "Runner", "RunnerSettings", "Service", "Undecodable", "run_until_stopped"]
