"""The runner: one service over one scope, rebuilt from the stream, then fold → reconcile, forever.

A `Runner` runs one service (runtime/reconcile.py `Service`) for one *scope*: every event (one
replica of everything, `jetway up`), or one partition (a shard of a scaled-out service,
runtime/replica.py, which also folds the cluster-wide `g` partition).

- **Rebuild on start.** Every event in scope the service consumes is folded from the stream
  (from its snapshot, runtime/snapshots.py, when it has one), with no effects. Then every known
  resource in scope is reconciled once; a decision already recorded is not recorded again.
- **Following.** After the rebuild the runner follows its scope through its feeds
  (runtime/feed.py): ordered consumers of its own, in stream order, read in batches. Each batch is
  folded, then the resources it affects are reconciled once each. What a crash left unreconciled
  is caught by the next holder's start-up pass, as controller-runtime's informers do after a
  restart.
- **The work queue** (runtime/workqueue.py) reconciles a key once at a time and retries it per
  key with a rate limiter: exponential backoff from `RunnerSettings.backoff` up to
  `backoff_cap`, `Temporary(delay=...)`, `Again(after=...)`, and `Permanent` recorded and not
  retried (runtime/reconcile.py).
- **Dead letters** are for what cannot be read: an event no decoder can read, or whose fold raises,
  goes to `jetway.dlq.<service>` with the reason, at once. It goes there only from the runner
  whose partition the event is in (a global event is read by every shard). A reconcile that fails
  is never dead-lettered: its key is retried.
- **Exactly-once decisions.** A service's decisions live on its own facet subject. Each is appended
  with the facet's last sequence as the projection knew it when the reconcile began. A replayed
  event, a second replica, or a decision made from a view that another writer's decision overtook
  gets a conflict instead of a duplicate, refreshes, and reconciles again. Message ids are derived
  from the decision, so a retried append is absorbed by JetStream's de-duplication. A shard whose
  lease lapsed (`valid`) stops deciding before anything else.
- **Snapshots** (runtime/snapshots.py): every `snapshots.every_events` events or `every_seconds`,
  the projection is stored with the sequence each followed filter is covered through; a start
  loads it and replays only the events after it.
- NATS restarts are survived (the client reconnects; the feeds' consumers are made again);
  SIGTERM stops the loop after the batch in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from contracts.events import Envelope, Event, UndecodableEvent, decode, type_tag
from contracts.subjects import DLQ_PREFIX, Key, facet_filter, matcher, subject_partition
from runtime import metrics, telemetry
from runtime.bus import DLQ_STREAM, EVENTS_STREAM, UNANSWERED, StreamSettings, ensure_streams, patiently, streams_from_env
from runtime.eventstore import EventStore, Item
from runtime.feed import Delivery, Feed, feeds_of, follow
from runtime.reconcile import Again, Effects, NotHeld, Permanent, Requeue, Service, Writes
from runtime.snapshots import Codec, Restored, SnapshotSettings, SnapshotStore, Unusable, settings_from_env
from runtime.tasks import cancel_and_wait
from runtime.workqueue import WorkQueue

log = logging.getLogger("jetway.service")


@dataclass(frozen=True)
class RunnerSettings:
    batch: int = 64  # events handled together (their keys reconciled once each)
    heartbeat: float = 2.0  # the feeds' consumers' idle heartbeat: one silent for two of them is made again
    # A key's retries after failures in a row: these waits in order, then each double the last, up to the cap
    backoff: tuple[float, ...] = (0.2,)
    backoff_cap: float = 60.0
    concurrency: int = 16
    conflict_retries: int = 5
    streams: StreamSettings = field(default_factory=streams_from_env)  # JETWAY_HISTORY_PER_FACET, read once
    snapshots: SnapshotSettings = field(default_factory=settings_from_env)  # JETWAY_SNAPSHOT_*, read once
    manage_streams: bool = True  # False: a reader (the console) only creates missing streams, never changes them


def _dedupe(keys: Iterable[Key]) -> list[Key]:
    return list(dict.fromkeys(keys))


class Runnable(Protocol):
    """What `run_until_stopped` and a process's health checks need of a runner or a replica of shards."""

    name: str
    ready: asyncio.Event

    async def run(self) -> None: ...

    def stop(self) -> None: ...


class Runner:
    """Runs one service over one scope (the module's docstring): every event (`partition=None`), or one partition.

    `owns` narrows which keys a runner of every event decides about (a replicated service whose replicas
    split the work by leases: the router's probes, the watcher's kinds); `valid` says whether a shard's lease
    still holds (runtime/replica.py): when it stops holding, the runner stops deciding at once and ends."""

    def __init__(
        self,
        service: Service,
        nc: Client,
        settings: RunnerSettings | None = None,
        *,
        partition: str | None = None,
        owns: Callable[[Key], bool] | None = None,
        valid: Callable[[], bool] | None = None,
    ) -> None:
        self.service = service
        self.nc = nc
        self.settings = settings or RunnerSettings()
        self.partition = partition
        self._owns = owns
        self._valid = valid
        self.name = service.name if partition is None else f"{service.name}/{partition}"
        self.store = EventStore(nc, producer=service.name)
        self.js: JetStreamContext = nc.jetstream(timeout=5)
        self.seen: dict[str, int] = {}  # subject → last folded stream sequence
        self.folds = 0  # events folded so far; an Effects compares it with `_moved` to see what moved since it began
        self._moved: dict[str, tuple[int, int]] = {}  # subject → (`folds` at its last fold, its sequence before that fold)
        self.writes = Writes(self, self.settings.conflict_retries)  # a request's writes (the watcher's applies), not a reconcile's
        self.ready = asyncio.Event()
        self.passes = 0  # level-triggered passes over every key completed (start-up, resyncs)
        self.retries = 0  # reconciles retried after a failure, or asked for again (`Again`)
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._limit = asyncio.Semaphore(self.settings.concurrency)
        self.queue: WorkQueue[Envelope] = WorkQueue(
            self._reconcile_now,
            name=self.name,
            backoff=self.settings.backoff,
            cap=self.settings.backoff_cap,
            on_retry=self._retrying,
            on_permanent=self._failed_for_good,
        )
        self._tracer = trace.get_tracer("jetway.service")
        self._metrics = metrics.RunnerMetrics(service.name)  # Prometheus (runtime/metrics.py), its children cached
        # Feeds read a broad filter and match the service's filters here: on nats-server 2.15 a consumer
        # with several filter subjects delivers ~50x slower than one with a single filter (docs/event-store.md).
        self._wanted = matcher(self.filters)
        self.feeds = feeds_of(partition, self.filters, service.everywhere)
        # Snapshots: `covered[label]` is the sequence through which every event of that feed is folded (an
        # `emit` folds its own decision ahead of it, which `seen` remembers): what a snapshot says it holds.
        self.covered: dict[str, int] = {}
        self.lags: dict[str, int] = {}
        self.restored: Restored | None = None  # the snapshot this start began from, if any
        self.snapshots_written = 0
        self.replayed = 0  # events the last rebuild read from the stream (after the snapshot, if one was loaded)
        self._snapshots = SnapshotStore(self.js, service.name, partition) if self.settings.snapshots.enabled else None
        self._codec: Codec | None = None
        self._stream_created = ""
        self._folds_at_snapshot = 0
        self._snapshot_at = time.monotonic()
        self._snapshotting: asyncio.Task[None] | None = None

    @property
    def filters(self) -> list[str]:
        return list(dict.fromkeys([*self.service.consumes, *self.service.everywhere, facet_filter(self.service.name)]))

    def wants(self, subject: str) -> bool:
        return self._wanted.match(subject) is not None

    def owns(self, key: Key) -> bool:
        """Whether this runner decides about `key` (its partition's; or, over every event, what `owns` grants)."""
        if self.partition is not None:
            return key.partition == self.partition
        return self._owns is None or self._owns(key)

    def acting(self) -> bool:
        """Whether this runner may decide now: a shard only while its lease holds."""
        return self._valid is None or self._valid()

    @property
    def lag(self) -> int:
        """Events stored in scope and not handled yet (as the feeds last said)."""
        return sum(self.lags.values())

    def lag_by_feed(self) -> list[tuple[str, int]]:
        """(feed, events its consumer still had to deliver) for each feed, as its last delivery said: read when
        scraped, in another thread, so `lags` is copied in one step."""
        lags = dict(self.lags)
        return [(feed.label, lags.get(feed.label, 0)) for feed in self.feeds]

    @property
    def seq(self) -> int:
        """The highest sequence this runner's feeds are covered through."""
        return max(self.covered.values(), default=0)

    @property
    def busy(self) -> bool:
        """Whether a reconcile is running or waiting for its turn (a retry scheduled for later is not)."""
        return self.queue.busy

    @property
    def failed(self) -> dict[Key, str]:
        """Keys whose last reconcile said `Permanent`, with the reason: standing until the key reconciles again."""
        return dict(self.queue.failed)

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

    def _fold_item(self, item: Item, *, wanted: bool = False) -> None:
        """Fold an event read from the stream (`wanted`: the caller matched the service's filters already)."""
        if not wanted and not self.wants(item.subject):
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
        self.covered = await self._restore()
        since = dict(self.covered)
        replayed = 0

        def fold_item(item: Item) -> None:
            nonlocal replayed
            replayed += 1
            self._fold_item(item, wanted=True)  # scan's `select` matched it

        for feed in self.feeds:
            # scanned again from the same point if NATS leaves it unanswered: what was folded already is skipped (`fold`)
            start = self.covered.get(feed.label, 0) + 1
            scan = functools.partial(self.store.scan, feed.filter, fold_item, select=self.wants, since_seq=start)
            last = await patiently(scan, f"{self.name}: rebuilding from {feed.label}", self._stopping)
            self.covered[feed.label] = max(self.covered.get(feed.label, 0), last)
        # what was replayed counts toward the next snapshot: a long replay is followed by one
        self._folds_at_snapshot, self._snapshot_at = 0, time.monotonic()
        self.replayed = replayed
        self._metrics.replayed.inc(replayed)  # counted once, not per event: a rebuild folds 100k+ events/s
        if self.restored is not None:
            self.restored.events_since = replayed
        log.info(
            "projection rebuilt",
            extra={
                "service": self.name,
                "through_seq": self.seq,
                "from_snapshot_seq": max(since.values(), default=0) or None,
                "events_replayed": replayed,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        return self.seq

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
                log.error("snapshots off: %s", exc, extra={"service": self.name})
                self._snapshots = None
        return self._codec

    async def _restore(self) -> dict[str, int]:
        """Load the snapshot into the projection; what each feed is covered through by it (empty: from the start)."""
        info = await patiently(lambda: self.js.stream_info(EVENTS_STREAM), f"{self.name}: the event stream's state", self._stopping)
        self._stream_created = str(info.created or "")
        codec = self.codec()
        if codec is None or self._snapshots is None:
            return {}
        try:
            data = await self._snapshots.get()
            if data is None:
                return {}
            snapshot = codec.header(data)
            if snapshot.stream_created != self._stream_created or snapshot.seq > int(info.state.last_seq):
                raise Unusable(f"taken of another event stream (created {snapshot.stream_created}, through {snapshot.seq})")
            if set(snapshot.covered) != {feed.label for feed in self.feeds}:
                raise Unusable(f"taken of other feeds ({', '.join(sorted(snapshot.covered))})")
            codec.restore(snapshot, self.service.projection())
        except Unusable as exc:
            log.warning("snapshot ignored, replaying from the start: %s", exc, extra={"service": self.name})
            return {}
        except Exception as exc:  # NATS, a missing chunk: the snapshot only saves time
            log.warning("snapshot not read, replaying from the start: %s: %s", type(exc).__name__, exc, extra={"service": self.name})
            return {}
        self.seen = dict(snapshot.seen)
        self.restored = Restored(snapshot.seq, dict(snapshot.seen), snapshot.written_at)
        log.info("snapshot loaded", extra={"service": self.name, "seq": snapshot.seq, "written_at": snapshot.written_at.isoformat()})
        return dict(snapshot.covered)

    def _snapshot_due(self) -> bool:
        since = self.folds - self._folds_at_snapshot
        settings = self.settings.snapshots
        return since >= settings.every_events or (since > 0 and time.monotonic() - self._snapshot_at >= settings.every_seconds)

    def snapshot_now(self) -> asyncio.Task[None] | None:
        """Take a snapshot (synchronously: no fold runs between the state and its sequences) and store it in
        the background; the storing task, or None when snapshots are off or one is being stored."""
        codec = self.codec()
        if codec is None or self._snapshots is None or (self._snapshotting is not None and not self._snapshotting.done()):
            return None
        if not self.acting():
            return None  # a shard that lost its lease leaves the snapshot to the next holder
        try:
            data = codec.encode(
                self.service.projection(),
                runner=self.name,
                seq=self.seq,
                covered=dict(self.covered),
                seen=dict(self.seen),
                stream_created=self._stream_created,
            )
        except Exception as exc:  # a projection holding what must not be stored: no snapshot, said loudly
            log.error("snapshot not taken: %s: %s", type(exc).__name__, exc, extra={"service": self.name})
            self._folds_at_snapshot, self._snapshot_at = self.folds, time.monotonic()
            return None
        self._folds_at_snapshot, self._snapshot_at = self.folds, time.monotonic()
        self._snapshotting = asyncio.create_task(self._store_snapshot(data, self.seq), name=f"{self.name}-snapshot")
        return self._snapshotting

    async def snapshot(self) -> bool:
        """Take a snapshot of the projection as it is now and store it, after one being stored (if any) ends;
        whether one was stored."""
        if self._snapshotting is not None and not self._snapshotting.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._snapshotting)
        written = self.snapshots_written
        storing = self.snapshot_now()
        if storing is None:
            return False
        await storing
        return self.snapshots_written > written

    async def _store_snapshot(self, data: bytes, seq: int) -> None:
        assert self._snapshots is not None
        started = time.perf_counter()
        try:
            await self._snapshots.put(data)
        except Exception as exc:
            log.warning("snapshot not stored: %s: %s", type(exc).__name__, exc, extra={"service": self.name})
            return
        self.snapshots_written += 1
        log.info(
            "snapshot stored",
            extra={"service": self.name, "seq": seq, "bytes": len(data), "seconds": round(time.perf_counter() - started, 3)},
        )

    async def _snapshot_timer(self) -> None:
        if self.codec() is None:
            return
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(min(self.settings.snapshots.every_seconds, 60.0)):  # not wait_for (3.11)
                    await self._stopping.wait()
            if not self._stopping.is_set() and self._snapshot_due():
                self.snapshot_now()

    async def refresh(self, subject: str, actual: int | None = None) -> None:
        """Fold what a conflict says we missed on one subject. A subject whose last sequence is now below what
        was folded was purged (a deleted resource's history, runtime/bus.py): it starts over from there."""
        if actual is not None and actual < self.seen.get(subject, 0):
            self.seen[subject] = actual
            self._moved.pop(subject, None)
        await self.store.scan(subject, self._fold_item, since_seq=self.seen.get(subject, 0) + 1)

    # --- reconciling -----------------------------------------------------------------------

    async def reconcile(self, key: Key, cause: Envelope | None = None) -> None:
        """Reconcile `key`, after the reconcile of it in progress if there is one; returns once done, raises its error.

        One reconcile of a key at a time (runtime/workqueue.py): a resync pass that began before an event was
        folded would otherwise write after that event's reconcile (an object re-created after its withdrawal).
        Asked while it runs, the key is reconciled once more after, and every request until that run starts
        joins it: a burst of events, a resync and a re-probe cost one reconcile, not one each. A failure
        schedules the key's retry, whoever asked.
        """
        await self.queue.reconcile(key, cause)

    async def _reconcile_now(self, key: Key, cause: Envelope | None) -> Again | None:
        for _ in range(self.settings.conflict_retries):
            try:
                async with self._limit:
                    started = time.perf_counter()
                    try:
                        return await self.service.reconcile(key, Effects(self, cause))
                    finally:
                        self._metrics.reconcile.observe(time.perf_counter() - started)
            except Requeue:  # the projection was refreshed: decide again from the fresh view
                continue
        raise RuntimeError(f"{key}: still conflicting after {self.settings.conflict_retries} refreshes")

    def _retrying(self, key: Key) -> None:
        self.retries += 1
        telemetry.events_redelivered.add(1, {"service": self.service.name})
        self._metrics.retried.inc()

    def _failed_for_good(self, key: Key, reason: str) -> None:
        # the handler's reason and nothing else of the error: it is what an operator reads, and it may be shown
        self._metrics.permanent.inc()
        log.error("reconcile failed for good, not retried", extra={"service": self.name, "resource": str(key), "reason": reason})

    async def reconcile_all(self, partition: str | None = None) -> None:
        """A level-triggered pass over every key this runner owns (of one partition, when given)."""
        keys = [k for k in _dedupe(self.service.keys()) if self.owns(k) and (partition is None or k.partition == partition)]
        results = await asyncio.gather(*(self.reconcile(k) for k in keys), return_exceptions=True)
        for error in results:
            if isinstance(error, BaseException) and not isinstance(error, asyncio.CancelledError | NotHeld):
                log.warning("reconcile failed: %s", error, extra={"service": self.name})
        self.passes += 1

    # --- following the stream --------------------------------------------------------------

    async def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move an event that cannot be read or folded aside with the reason, once: by the runner whose partition
        it is in."""
        if self.partition is not None and subject_partition(delivery.subject) != self.partition:
            return
        headers = {
            "Jetway-Dlq-Subject": delivery.subject,
            "Jetway-Dlq-Seq": str(delivery.seq),
            "Jetway-Dlq-Reason": reason[:1000],
            "Jetway-Dlq-Service": self.service.name,
        }
        try:
            await self.js.publish(f"{DLQ_PREFIX}.{self.service.name}", delivery.data, stream=DLQ_STREAM, headers=headers)
        except Exception as exc:  # NATS away: said, not raised (the event stays in the log)
            log.error("event not dead-lettered: %s", exc, extra={"service": self.name, "subject": delivery.subject})
            return
        telemetry.events_dead_lettered.add(1, {"service": self.service.name})
        self._metrics.dead_lettered.inc()
        log.error("event dead-lettered", extra={"service": self.name, "subject": delivery.subject, "reason": reason})

    async def handle_batch(self, feed: Feed, deliveries: list[Delivery]) -> None:
        started = time.perf_counter()
        pending: list[tuple[Delivery, Envelope, list[Key]]] = []  # delivery, its event, the keys it affects
        done: list[type[Event]] = []  # folded, nothing of ours to reconcile: counted together (runtime/metrics.py)
        label = feed.label
        covered = self.covered.get(label, 0)
        wants = self._wanted.match
        for delivery in deliveries:
            # every event of the feed up to this one is handled by the next await (the sequence a snapshot holds):
            # folded below, or skipped (not wanted, undecodable, a fold that failed)
            covered = max(covered, delivery.seq)
            self.covered[label] = covered
            if wants(delivery.subject) is None:
                continue
            try:
                envelope = decode(delivery.data, subject=delivery.subject, seq=delivery.seq, stored_at=delivery.stored)
            except UndecodableEvent as exc:
                self.seen[delivery.subject] = max(self.seen.get(delivery.subject, 0), delivery.seq)
                await self._dead_letter(delivery, exc.reason)
                self._metrics.handled(["unknown"], "invalid")
                continue
            try:
                folded = self.fold(envelope)
                keys = [k for k in _dedupe(self.service.affected(envelope)) if self.owns(k)]
            except Exception as exc:  # a fold that fails on a valid event will fail again: do not retry it
                await self._dead_letter(delivery, f"fold failed: {type(exc).__name__}: {exc}")
                self._metrics.handled([type(envelope.event)], "invalid")
                continue
            if not folded and envelope.producer == self.service.name:
                continue  # our own decision, echoed back: nothing new to reconcile (and not counted: `emit` folded it)
            if keys:
                pending.append((delivery, envelope, keys))  # counted once settled
            else:
                done.append(type(envelope.event))
        if deliveries:
            self.lags[label] = deliveries[-1].pending
        self._metrics.handled(done, "ok")
        if not self.acting():
            self.stop()  # the lease lapsed: the next holder reconciles what is in its partition
            self._metrics.handled([type(envelope.event) for _, envelope, _ in pending], "not_held")
            return
        await self._settle(pending)
        elapsed = time.perf_counter() - started
        telemetry.handler_duration.record(elapsed, {"service": self.service.name})
        self._metrics.handler.observe(elapsed)
        if self._snapshot_due():
            self.snapshot_now()

    async def _settle(self, pending: list[tuple[Delivery, Envelope, list[Key]]]) -> None:
        """Reconcile each affected key once (the latest event is its cause); a key that fails is retried by the work
        queue, after its backoff, or not at all when it said `Permanent`."""
        causes: dict[Key, tuple[Envelope, Delivery]] = {}
        for delivery, envelope, keys in pending:
            for key in keys:
                causes[key] = (envelope, delivery)
        failures: dict[Key, BaseException] = {}
        if len(causes) == 1:
            key, (cause, delivery) = next(iter(causes.items()))
            await self._reconcile_one(key, cause, delivery, failures)
        else:
            await asyncio.gather(*(self._reconcile_one(k, c, d, failures) for k, (c, d) in causes.items()))
        ok: list[type[Event]] = []  # counted together, after the loop
        for _, envelope, keys in pending:
            failed = [failures[k] for k in keys if k in failures]
            telemetry.events_handled.add(1, {"service": self.service.name, "type": envelope.type, "outcome": "failed" if failed else "ok"})
            # Prometheus counts each event once, when its handling ends (a retry of its keys is counted in `retried`)
            if not failed:
                ok.append(type(envelope.event))
            elif not self.acting() or isinstance(failed[0], NotHeld):
                self._metrics.handled([type(envelope.event)], "not_held")
            elif isinstance(failed[0], Permanent):
                self._metrics.handled([type(envelope.event)], "failed")
            else:
                self._metrics.handled([type(envelope.event)], "retrying")
        self._metrics.handled(ok, "ok")

    async def _reconcile_one(self, key: Key, cause: Envelope, delivery: Delivery, failures: dict[Key, BaseException]) -> None:
        # The producer's trace travels in the NATS headers; the envelope keeps a copy for replays.
        headers = delivery.header_map() if delivery.headers and b"traceparent" in delivery.headers else {}
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
                failures[key] = exc
                if isinstance(exc, Permanent):
                    span.set_status(Status(StatusCode.ERROR, exc.reason))
                else:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                if not isinstance(exc, NotHeld | Permanent):  # Permanent is logged once, by `_failed_for_good`
                    log.warning("reconcile failed", extra={"service": self.name, "resource": str(key), "error": str(exc)})

    def since(self, feed: Feed) -> int:
        """The sequence through which `feed` is handled: its consumer starts after it."""
        return self.covered.get(feed.label, 0)

    async def _follow(self, feed: Feed) -> None:
        await follow(
            self.nc,
            feed,
            since=functools.partial(self.since, feed),
            handle=self.handle_batch,
            stopping=self._stopping,
            batch=self.settings.batch,
            heartbeat=self.settings.heartbeat,
            name=self.name,
        )

    async def _resync(self) -> None:
        interval = self.service.resync_interval
        if not interval:
            return
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(interval):  # not wait_for: it can lose a cancellation on 3.11
                    await self._stopping.wait()
            if not self._stopping.is_set():
                await self.reconcile_all()

    async def run(self) -> None:
        """Rebuild, reconcile what is known, then follow the stream until `stop()`."""
        try:
            await patiently(
                lambda: ensure_streams(self.js, self.settings.streams, update=self.settings.manage_streams),
                f"{self.name}: streams",
                self._stopping,
            )
            await self.rebuild()
        except UNANSWERED as exc:
            if not self._stopping.is_set():
                raise
            # stopped while NATS kept it waiting (a shard whose lease went during its rebuild, on a starved node): a
            # stop, not a failure that takes its replica down (the first real node's pods restarted on it)
            log.info("service stopped before it had rebuilt (%s)", type(exc).__name__, extra={"service": self.name})
            return
        self.service.rebuilt()
        if self._snapshot_due():
            self.snapshot_now()
        telemetry.register_lag(self.name, lambda: self.lag)
        await self.reconcile_all()
        self._tasks = [
            *(asyncio.create_task(self._follow(feed), name=f"{self.name}-follow-{feed.label}") for feed in self.feeds),
            asyncio.create_task(self.service.alongside(self), name=f"{self.name}-alongside"),
            asyncio.create_task(self._resync(), name=f"{self.name}-resync"),
            asyncio.create_task(self._snapshot_timer(), name=f"{self.name}-snapshot-timer"),
        ]
        metrics.watch_lag(self, self.service.name, self.lag_by_feed)  # until the `finally` below
        self.ready.set()
        log.info("service running", extra={"service": self.name})
        try:
            stopping = asyncio.create_task(self._stopping.wait())
            done, _ = await asyncio.wait([stopping, *self._tasks[: len(self.feeds)]], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            for task in done:
                if task is not stopping and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]  # a feed that failed for good: the runner with it
        finally:
            metrics.unwatch(self)
            self._stopping.set()
            self.queue.stop()  # retries scheduled for later: the next start (or holder) reconciles every key anyway
            # cancelled again while they run on: nats-py can lose a cancellation (runtime/tasks.py)
            with contextlib.suppress(asyncio.CancelledError):
                await cancel_and_wait(*self._tasks)
            with contextlib.suppress(asyncio.CancelledError):  # reconciles still running for the cancelled duties (a resync pass)
                await cancel_and_wait(*self.queue.workers())
            if self._snapshotting is not None:  # a half-stored object would leave its chunks behind: let it finish
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(self._snapshotting), 30)
            log.info("service stopped", extra={"service": self.name})

    def stop(self) -> None:
        self._stopping.set()


async def run_until_stopped(
    runners: Iterable[Runnable], stop: asyncio.Event, on_ready: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Run several services (runners, or replicas of shards) in one process until `stop` is set (SIGTERM,
    Ctrl-C), then drain. A service that fails stops the others: a half-running control plane is worse than none.
    """
    runners = list(runners)
    tasks = [asyncio.create_task(r.run(), name=r.name) for r in runners]
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


__all__ = ["Runnable", "Runner", "RunnerSettings", "run_until_stopped"]
