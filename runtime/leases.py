"""Leases: which replica of a service holds which partitions, in a NATS KV bucket (`jetway-leases`).

Every replica of one service (a lease *group*: `selector`, `watcher`, ...) runs one `Leases`, which
every `interval` seconds:

1. renews its membership key `<group>.replica.<id>` (a plain put) and each lease it holds,
   `<group>.lease.<partition>`, with a revision-guarded update, all at once: a lease whose revision moved (it
   expired and another replica took it) is lost, and given up at once;
2. on a clock of its own (a *tick*, so that a slow read of the group cannot hold the renewals up), reads the
   group's keys (the last value of each: expired ones are gone) and works out its fair
   share, `ceil(partitions / live replicas)`; it releases leases above that share (its duty stopped first,
   then the key deleted, so another replica takes it on its next tick) and takes free ones below it
   (`create`, which fails when another replica got there first), trying them in an order of its own
   (rendezvous hashing), so replicas starting together do not all reach for the same ones.

The bucket's `max_age` is the lease TTL, so a key that is not renewed disappears by itself: a replica that
dies gives its partitions up within the TTL, and the others take them on their next tick. A replica stops
acting on a partition *before* its key can expire: a lease is valid until the time its last renewal was
sent plus the TTL less a margin (`deadline`), so the duty is stopped at that time when renewals keep failing
(NATS out of reach), and `valid()` says so to a duty that asks before each step. Clocks need only run at the
same rate, not agree.

What a lease guards is a duty, started by `on_gain(partition)` (which must return at once: start a task) and
stopped by `on_loss(partition)`. A release stops the duty beside the renewals, which go on meanwhile so the
lease cannot lapse while the duty winds down; the first tick after it ended deletes the key. Every write to the
bucket is one per key at a time: a key's renewal and its delete take turns. JetStream's
expected-last-subject-sequence remains the safety net under all of it: a replica that acts after losing a lease
(a paused process) has its decision refused by the facet's guard.

One mechanism, keyed by any string, serves every service that shares work between replicas: a service's shards
(runtime/replica.py: a key is a partition, the duty its runner), the router (a key is a partition, the duty its
probes of the members there) and the watcher (a key is a group of kinds, services/watcher/cluster.py GROUPS, the
duty their list-then-watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import nats.errors
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from contracts.subjects import encode_token
from runtime import metrics, settings
from runtime.bus import key_value, patiently
from runtime.tasks import cancel_and_wait

log = logging.getLogger("jetway.leases")

BUCKET = "jetway-leases"
STREAM = f"KV_{BUCKET}"
DEFAULT_TTL = settings.Leases().ttl  # JETWAY_LEASE_TTL_SECONDS
BUCKET_PLACEMENT_WAIT = 30.0  # seconds a forming cluster is given to place the bucket's three copies
MARGIN = 0.2  # of the TTL: a lease is given up this long before its key could expire


@dataclass(frozen=True)
class LeaseSettings:
    """`ttl`: how long a lease outlives its last renewal (the bucket's max_age); renewed every `ttl / 4`."""

    ttl: float = DEFAULT_TTL

    @property
    def interval(self) -> float:
        return self.ttl / 4

    @classmethod
    def of(cls, leases: settings.Leases) -> LeaseSettings:
        return cls(leases.ttl)

    @classmethod
    def configured(cls) -> LeaseSettings:
        """The process's (JETWAY_LEASE_TTL_SECONDS), read once."""
        return cls.of(settings.process().leases)


def replica_id(leases: settings.Leases | None = None) -> str:
    """This process's name among the replicas: JETWAY_REPLICA, else the host name (a pod's name), which no two
    live replicas share; a process that restarts under the same name takes its own leases back at once."""
    named = (leases or settings.process().leases).replica
    return named or socket.gethostname() or uuid.uuid4().hex[:12]


def preference(replica: str, partition: str) -> int:
    """Rendezvous hashing: each replica's own order of the partitions, stable, and different per replica."""
    return int.from_bytes(hashlib.sha256(f"{replica}\0{partition}".encode()).digest()[:8], "big")


def fair_share(partitions: int, replicas: int) -> int:
    return math.ceil(partitions / max(1, replicas))


@dataclass
class Held:
    revision: int
    deadline: float  # time.monotonic() after which it is no longer ours to act on


@dataclass(frozen=True)
class View:
    """The group's keys as last read: partition → holder (and its revision), and the live replicas."""

    holders: dict[str, tuple[str, int]] = field(default_factory=dict)
    replicas: frozenset[str] = frozenset()


def plan(view: View, me: str, held: Iterable[str], partitions: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(to release, to take): what this replica does about its share, given the group as it is (pure)."""
    mine = sorted(held, key=lambda p: preference(me, p), reverse=True)
    share = fair_share(len(partitions), len(view.replicas | {me}))
    if len(mine) > share:
        return mine[share:], []
    free = [p for p in partitions if p not in view.holders or (view.holders[p][0] == me and p not in mine)]
    free.sort(key=lambda p: preference(me, p), reverse=True)
    return [], free[: share - len(mine)]


def balanced(view: View, me: str, held: set[str], partitions: tuple[str, ...]) -> bool:
    """Whether the group has settled (pure): every partition held, none by a replica over its fair share."""
    holders = {p: h for p, (h, _) in view.holders.items() if p in partitions and h != me}
    holders.update(dict.fromkeys(held, me))
    share = fair_share(len(partitions), len(view.replicas | {me}))
    counts: dict[str, int] = {}
    for holder in holders.values():
        counts[holder] = counts.get(holder, 0) + 1
    return len(holders) == len(partitions) and all(count <= share for count in counts.values())


async def bucket(js: JetStreamContext, ttl: float) -> KeyValue:
    """The lease bucket, made on first use with `ttl` as its max_age (three copies where the cluster can place
    them). An existing bucket keeps the TTL it was made with: every replica reads it from there."""
    config = api.KeyValueConfig(bucket=BUCKET, description="which replica holds which partition", ttl=ttl, history=1, direct=True)
    return await key_value(js, config, deadline=asyncio.get_running_loop().time() + BUCKET_PLACEMENT_WAIT)


class Leases:
    """One replica's leases in one group (module docstring)."""

    def __init__(
        self,
        js: JetStreamContext,
        group: str,
        partitions: Iterable[str],
        *,
        replica: str | None = None,
        settings: LeaseSettings | None = None,
        on_gain: Callable[[str], Awaitable[None]] | None = None,
        on_loss: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.js = js
        self.group = group
        self.partitions = tuple(partitions)
        self.replica = replica or replica_id()
        self.settings = settings or LeaseSettings.configured()
        self.on_gain = on_gain
        self.on_loss = on_loss
        self.held: dict[str, Held] = {}
        self.ttl = self.settings.ttl  # the bucket's, once read
        self.ticks = 0
        self.settled = asyncio.Event()  # a tick found nothing to take or release
        self._kv: KeyValue | None = None
        self._stopping = asyncio.Event()
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._pending: set[asyncio.Task[None]] = set()  # duties being stopped
        self._releasing: dict[str, asyncio.Task[None]] = {}  # partition → its duty being stopped, for a release
        self._writes = asyncio.Lock()  # the renewals, and the deletes of released keys

    def key(self, partition: str) -> str:
        return f"{self.group}.lease.{encode_token(partition)}"

    @property
    def member_key(self) -> str:
        return f"{self.group}.replica.{encode_token(self.replica)}"

    def valid(self, partition: str) -> bool:
        """Whether this replica may act on `partition` now."""
        found = self.held.get(partition)
        return found is not None and time.monotonic() < found.deadline

    def holds(self) -> set[str]:
        return {p for p in self.held if self.valid(p)}

    def held_count(self) -> int:
        """How many leases are valid now; for `jetway_leases_held`, read by a scrape in another thread: `held` is
        copied in one step."""
        now = time.monotonic()
        return sum(1 for held in list(self.held.values()) if now < held.deadline)

    # --- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        # patiently: a pod may start while its NATS cluster still elects leaders (the first real node's install saw a
        # router exit on this call's timeout, restarted once); stopped meanwhile, it leaves with the error
        self._kv = kv = await patiently(lambda: bucket(self.js, self.settings.ttl), f"{self.group}: the lease bucket", self._stopping)
        status = await patiently(kv.status, f"{self.group}: the lease bucket's TTL", self._stopping)
        if status.ttl:
            self.ttl = float(status.ttl)
        metrics.watch_leases(self, self.group, self.held_count)  # a lease group is a service (its name)
        # renewals on a clock of their own: a slow read of the group (a busy server) must not hold them up
        renewing = asyncio.create_task(self._every_interval(self.renew, "renewal", None), name=f"{self.group}-renewals")
        try:
            await self._every_interval(self.balance, "tick", self._stopping)
        finally:
            try:
                await self.release_all(renewing)
            finally:
                renewing.cancel()
                metrics.unwatch(self)

    async def _every_interval(self, work: Callable[[], Awaitable[None]], what: str, until: asyncio.Event | None) -> None:
        """`work` every interval until `until` is set (or, without one, until cancelled)."""
        while until is None or not until.is_set():
            started = time.monotonic()
            try:
                await work()
            except (TimeoutError, nats.errors.Error, APIError) as exc:
                log.info("lease %s of %s failed (%s); trying again", what, self.group, type(exc).__name__)
            left = max(0.0, self.ttl / 4 - (time.monotonic() - started))
            if until is None:
                await asyncio.sleep(left)
                continue
            # asyncio.timeout, not wait_for: a cancellation wait_for lost here would keep a stopped replica ticking
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await until.wait()

    def stop(self) -> None:
        self._stopping.set()

    async def tick(self) -> None:
        """One round: renewals, then the group's balance (the module's docstring)."""
        await self.renew()
        await self.balance()

    async def renew(self) -> None:
        """The membership and every lease held, at once: one round trip, not one per lease (a replica holding
        nine leases on a starved event loop took longer than a lease lasts, renewing them in turn)."""
        kv = self._kv
        assert kv is not None
        async with self._writes:
            sent = time.monotonic()
            done = await asyncio.gather(
                kv.put(self.member_key, b""),
                *(self._renew(kv, partition, held.revision, sent) for partition, held in list(self.held.items())),
                return_exceptions=True,
            )
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome  # every renewal has ended: the next one starts from what landed

    async def balance(self) -> None:
        """Deletes the keys of releases whose duty ended, reads the group and takes or releases towards this
        replica's share. Takes go out together; a duty being stopped for a release runs beside the renewals."""
        kv = self._kv
        assert kv is not None
        async with self._writes:  # a key's delete and its renewal one at a time
            for partition, stopping in list(self._releasing.items()):
                if stopping.done():  # its duty ended: the key goes, for another replica to take
                    del self._releasing[partition]
                    dropped = self._drop(partition)
                    if dropped is not None:
                        with contextlib.suppress(KeyWrongLastSequenceError):
                            await kv.delete(self.key(partition), last=dropped.revision)
                        log.info("lease %s/%s released by %s", self.group, partition, self.replica)
        view = await self.read()
        release, take = plan(view, self.replica, [p for p in self.held if p not in self._releasing], self.partitions)
        for partition in release:
            self._releasing[partition] = self._spawn(self._stop_duty(partition))
        await asyncio.gather(*(self._take(kv, partition, view.holders.get(partition)) for partition in take))
        self.ticks += 1
        if not release and not take and not self._releasing and balanced(view, self.replica, set(self.held), self.partitions):
            self.settled.set()

    async def _take(self, kv: KeyValue, partition: str, current: tuple[str, int] | None) -> None:
        sent = time.monotonic()
        try:
            if current is not None:  # our own, from before a restart under the same name
                revision = await kv.update(self.key(partition), self.replica.encode(), last=current[1])
            else:
                revision = await kv.create(self.key(partition), self.replica.encode())
        except KeyWrongLastSequenceError:
            return  # another replica took it first
        self._hold(partition, revision, sent)
        log.info("lease %s/%s taken by %s", self.group, partition, self.replica)
        if self.on_gain is not None:
            await self.on_gain(partition)

    async def _renew(self, kv: KeyValue, partition: str, revision: int, sent: float) -> None:
        try:
            revision = await kv.update(self.key(partition), self.replica.encode(), last=revision)
        except KeyWrongLastSequenceError:
            reclaimed = await self._own_renewal(kv, partition)
            if reclaimed is None:
                log.warning("lease %s/%s of %s was taken over: giving it up", self.group, partition, self.replica)
                self._lose(partition)
                return
            revision = reclaimed
        if partition in self.held:  # not lost meanwhile (its deadline passed while this update was out)
            self._hold(partition, revision, sent)

    async def read(self) -> View:
        """The group's keys now, from the stream's leader: the subjects it holds for the group, then the last message
        of each, asked all at once. Each key is read as it was at some moment of the read, a key rewritten meanwhile
        included. (An ordered consumer delivering the last message per subject, and trusting its pending count to
        say when it was done, missed every key a replica renewed while the read went on: the server dropped the
        replaced messages from the count without adding their successors, and the others, not seeing that replica,
        took more than their share and gave it back; tests/runtime/test_leases.py.)"""
        prefix = f"$KV.{BUCKET}."
        lease_prefix, member_prefix = f"{prefix}{self.group}.lease.", f"{prefix}{self.group}.replica."
        tokens = {encode_token(p): p for p in self.partitions}
        info = await self.js.stream_info(STREAM, subjects_filter=f"{prefix}{self.group}.>")
        subjects = [s for s in info.state.subjects or {} if s.startswith(member_prefix) or s[len(lease_prefix) :] in tokens]
        # not direct: a direct get may be answered by a copy still catching up (the node's NATS-pod test saw it)
        found = await asyncio.gather(*(self.js.get_last_msg(STREAM, subject) for subject in subjects), return_exceptions=True)
        holders: dict[str, tuple[str, int]] = {}
        replicas: set[str] = set()
        for subject, msg in zip(subjects, found, strict=True):
            if isinstance(msg, NotFoundError):
                continue  # expired or deleted since it was listed
            if isinstance(msg, BaseException):
                raise msg
            headers = msg.headers or {}
            if headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers or msg.seq is None:
                continue
            if subject.startswith(member_prefix):
                replicas.add(subject[len(member_prefix) :])
            else:
                holders[tokens[subject[len(lease_prefix) :]]] = ((msg.data or b"").decode(), msg.seq)
        me = encode_token(self.replica)
        return View(
            {p: (self.replica if h == self.replica else h, rev) for p, (h, rev) in holders.items()},
            frozenset(self.replica if r == me else r for r in replicas),
        )

    async def _own_renewal(self, kv: KeyValue, partition: str) -> int | None:
        """A renewal refused for its revision: if the key still names this replica, the revision was moved by its
        own earlier renewal whose reply was lost (a NATS node lost mid-request), not by a takeover, since another
        replica writes its own name. Renewed from there; None when it is really another's (or gone)."""
        try:
            entry = await kv.get(self.key(partition))
        except KeyNotFoundError:
            return None
        if (entry.value or b"").decode() != self.replica or entry.revision is None:
            return None
        try:
            revision = await kv.update(self.key(partition), self.replica.encode(), last=entry.revision)
        except KeyWrongLastSequenceError:
            return None
        log.info("lease %s/%s of %s: its own renewal had landed unanswered; kept", self.group, partition, self.replica)
        return revision

    # --- holding and giving up -------------------------------------------------------------------

    def _hold(self, partition: str, revision: int, sent: float) -> None:
        deadline = sent + self.ttl * (1 - MARGIN)
        self.held[partition] = Held(revision, deadline)
        timer = self._expiry.pop(partition, None)
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._expiry[partition] = loop.call_at(loop.time() + (deadline - time.monotonic()), self._expired, partition)

    def _expired(self, partition: str) -> None:
        if partition in self.held and not self.valid(partition):
            log.warning("lease %s/%s of %s not renewed in time: giving it up", self.group, partition, self.replica)
            self._lose(partition)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _stop_duty(self, partition: str) -> None:
        if self.on_loss is not None:
            try:
                await self.on_loss(partition)
            except Exception as exc:  # the duty is gone either way
                log.error("stopping %s/%s failed: %s", self.group, partition, exc)

    def _drop(self, partition: str) -> Held | None:
        timer = self._expiry.pop(partition, None)
        if timer is not None:
            timer.cancel()
        return self.held.pop(partition, None)

    def _lose(self, partition: str) -> None:
        """No longer ours (taken over, or not renewed in time): stop acting now, leave the key be."""
        if self._drop(partition) is not None and partition not in self._releasing:
            self._spawn(self._stop_duty(partition))

    async def release_all(self, renewing: asyncio.Task[None] | None = None) -> None:
        """Stopping: every duty ends (renewed meanwhile by `renewing`, so none lapses while it winds down), then
        every key goes (and the membership), so others take over at once."""
        for partition in self.held:
            if partition not in self._releasing:
                self._releasing[partition] = self._spawn(self._stop_duty(partition))
        await asyncio.gather(*self._releasing.values(), return_exceptions=True)
        await asyncio.gather(*self._pending, return_exceptions=True)
        async with self._writes:  # a renewal in flight lands first: each delete names the revision it made
            if renewing is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await cancel_and_wait(renewing)  # a renewal's cancellation nats-py lost would renew on (runtime/tasks.py)
            self._releasing.clear()
            for partition in list(self.held):
                held = self._drop(partition)
                if held is not None and self._kv is not None:
                    with contextlib.suppress(Exception):
                        await self._kv.delete(self.key(partition), last=held.revision)
        if self._kv is not None:
            with contextlib.suppress(Exception):
                await self._kv.delete(self.member_key)


__all__ = ["BUCKET", "LeaseSettings", "Leases", "View", "balanced", "fair_share", "plan", "preference", "replica_id"]
