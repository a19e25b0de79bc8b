"""What a service is, what its reconcile may do, and what it may answer.

A service (`Service`) names the subjects it consumes, folds events into its projection, says which
resources an event affects, and reconciles one resource at a time: `reconcile(key, effects)` reads
the projection, decides, and records decisions through `effects.emit`.

A reconcile ends in one of four ways, as in controller-runtime (`Result{RequeueAfter}`,
`TerminalError`) and kopf (`TemporaryError(delay=...)`, `PermanentError`):

- it returns None: done; the key's failures are forgotten;
- it returns `Again(after=...)`: done for now, look again after that many seconds (a Job to watch,
  a registry to ask later);
- it raises `Temporary(reason, delay=...)`: not now; the key is retried after `delay`, or after
  its own backoff when no delay is given. Any other exception is retried after the backoff too;
- it raises `Permanent(reason)`: this will not work as things stand. It is logged with the reason,
  with nothing else of the error, and not retried. The key is reconciled again only when asked
  again: an event about it, a resync, a restart. To show the failure in the resource's status,
  the service records its own failure decision before raising (`SelectionFailed`, `RenderFailed`):
  each facet has one writer, and the runtime writes no decision of a service's.

The runner (runtime/runner.py) calls these; its work queue (runtime/workqueue.py) acts on the
answers.

A write that no event caused (a request's: the front door's apply, what a cluster showed) goes through
`Writes` instead, the same append and fold with its own conflict loop: it runs the whole attempt again,
deciding afresh, where a reconcile is requeued.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec
from nats.aio.client import Client

from contracts.events import Envelope, Event
from contracts.subjects import Key
from runtime.eventstore import Conflict, EventStore

T = TypeVar("T")


class Service:
    """What a service declares; the runner calls these. Subclasses override what they use."""

    name: str = "service"
    consumes: tuple[str, ...] = ()  # subject filters; the service's own facet is added
    # Filters the shard of the global partition also follows in every partition: what an aggregate over all of
    # them, decided once, reads (the Gateways' cross-namespace admission). A runner of every event reads them anyway.
    everywhere: tuple[str, ...] = ()
    resync_interval: float | None = None  # seconds between level-triggered passes over every key

    def fold(self, envelope: Envelope) -> None:
        """Fold one event into the projection. Pure state change, no I/O."""

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        """The resources to reconcile because of this event."""
        return (envelope.key,)

    def keys(self) -> Iterable[Key]:
        """Every resource the projection knows, for start-up and resync passes."""
        return ()

    async def reconcile(self, key: Key, effects: Effects) -> Again | None:
        """Bring one resource to what the projection says it should be (the module's docstring: what it may answer)."""
        return None

    async def alongside(self, runner: Any) -> None:
        """Duties that run beside the consumer (probes, servers), given the runtime.runner.Runner (not named here: it
        imports this module); cancelled on stop."""

    def rebuilt(self) -> None:
        """Called once the projection is rebuilt from the stream, before anything is reconciled."""

    def projection(self) -> Any:
        """What snapshots hold (runtime/snapshots.py): everything `fold` writes, nothing else; by convention
        `self.state` when that is a dataclass or a msgspec Struct. None: not snapshotted (it replays from the start)."""
        state = getattr(self, "state", None)
        return state if (dataclasses.is_dataclass(state) and not isinstance(state, type)) or isinstance(state, msgspec.Struct) else None


# --- what a reconcile may answer ----------------------------------------------------------------


@dataclass(frozen=True)
class Again:
    """Done for now: reconcile the key again after `after` seconds (sooner if an event asks)."""

    after: float


class Temporary(Exception):
    """Not now: retry the key after `delay` seconds, or after its backoff (None)."""

    def __init__(self, reason: str, *, delay: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class Permanent(Exception):
    """This will not work as things stand: recorded, never retried (the key is reconciled when asked again)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Requeue(Exception):
    """Reconcile the key again (the projection was refreshed after a conflict)."""


class NotHeld(Exception):
    """The runner's partition is no longer this replica's to decide about (its lease lapsed)."""


# --- what a reconcile may do --------------------------------------------------------------------


class Decider(Protocol):
    """The runner, as `Effects` (and a reconcile, through `effects.runner`) sees it: where decisions are appended
    and folded, its connection, and which keys are its own to decide about."""

    service: Service
    store: EventStore
    nc: Client
    folds: int

    def acting(self) -> bool: ...

    def owns(self, key: Key) -> bool: ...

    def seq_before(self, subject: str, folds: int) -> int: ...

    def fold(self, envelope: Envelope) -> bool: ...

    async def refresh(self, subject: str, actual: int | None = None) -> None: ...


class Effects:
    """What a reconcile may do; every write goes through here so the runner can keep the projection true."""

    def __init__(self, runner: Decider, cause: Envelope | None) -> None:
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
        if not self.runner.acting():
            raise NotHeld(f"{key}: partition {key.partition} is no longer held here")
        subject = key.subject(facet or self.runner.service.name)
        expected = self._appended.get(subject)
        if expected is None:
            expected = self.runner.seq_before(subject, self._began)
        body = msgspec.json.encode(event)
        msg_id = hashlib.sha256(f"{subject}\0{expected}\0".encode() + body).hexdigest()[:32]
        try:
            envelope = await self.runner.store.append(subject, event, expected_seq=expected, cause=self.cause, msg_id=msg_id)
        except Conflict as conflict:
            await self.runner.refresh(subject, conflict.actual)
            raise Requeue(str(key)) from None
        self.runner.fold(envelope)
        self._appended[subject] = envelope.seq
        return envelope


class Writes:
    """The writes a request makes through a runner (the watcher's applies, deletes and what the cluster showed): the
    same guarded append and fold as `Effects`, serialised by one lock so each attempt decides on what the one before
    it wrote, and retried as a whole after a conflict (another writer got there first: the facet is refreshed from
    the stream and the attempt decides again), `tries` times before the last `Conflict` is raised."""

    def __init__(self, runner: Decider, tries: int) -> None:
        self.runner = runner
        self.tries = max(1, tries)
        self._lock = asyncio.Lock()

    async def write(self, attempt: Callable[[], Awaitable[T]]) -> T:
        async with self._lock:
            for tried in range(1, self.tries + 1):
                try:
                    return await attempt()
                except Conflict as conflict:
                    if tried == self.tries:
                        raise
                    await self.runner.refresh(conflict.subject, conflict.actual)
        raise AssertionError("unreachable")

    async def append(self, subject: str, event: Event, *, expected: int | None = None) -> Envelope:
        """Append after the subject's last folded event (or `expected`, a resource version the caller checked), and
        fold it. Within `write` only: the lock is what makes "last folded" the last."""
        assert self._lock.locked(), "Writes.append outside Writes.write"
        if expected is None:
            expected = self.runner.seq_before(subject, self.runner.folds)  # its last folded sequence
        envelope = await self.runner.store.append(subject, event, expected_seq=expected)
        self.runner.fold(envelope)
        return envelope

    def check_fits(self, subject: str, event: Event) -> None:
        """Raise EventTooLarge before anything is written, when `event` would not fit in one message."""
        self.runner.store.check_fits(subject, event)


__all__ = ["Again", "Decider", "Effects", "NotHeld", "Permanent", "Requeue", "Service", "Temporary", "Writes"]
