"""The watcher service: folds every event into the resources projection and records applies (the front door's
`Recorder`, contracts/frontdoor.py: services/console/api.py calls `apply` and `delete`, and reads nothing else here).

Every write (an apply, a delete, what the cluster showed) goes through the runner's `Writes` (runtime/reconcile.py):
an append guarded by its facet's last sequence, serialised, and decided again after a conflict. In Kubernetes
mode `ClusterSync` (cluster.py) drives the cluster side; it sees this service only as a `Recorder`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from contracts.admission import Admission, Known, admit, judge, judged, stored
from contracts.cluster import OBSERVED
from contracts.events import Envelope, Event, ResourceDeleted, StatusReported, StatusSlice
from contracts.frontdoor import Applied, Deleted, Refused
from contracts.kinds import KINDS
from contracts.pipeline import ProviderRegistered
from contracts.problems import Problem
from contracts.rules.provider import ProviderLookup
from contracts.subjects import ALL_EVENTS, REPORTED, SPEC, WORKLOAD, Key, facet_filter
from runtime.bus import EVENTS_STREAM
from runtime.eventstore import Conflict, EventTooLarge, Item
from runtime.leases import Leases
from runtime.resources import ResourceState
from runtime.service import Effects, Runner, Service
from services.watcher.cluster import ClusterSync
from services.watcher.decide import history
from services.watcher.decide.apply import Plan, Stale, key_of, plan
from services.watcher.decide.ingest import typed
from services.watcher.projection import WatcherState

log = logging.getLogger("jetway.watcher")
REPORTING_KINDS = ("InferenceProviderConfig", "AgentProviderConfig")


def too_large(exc: EventTooLarge) -> str:
    return f"its event would be {exc.size} bytes, more than the {exc.limit} bytes NATS takes in one message (its max_payload)"


class WatcherService(Service):
    name = "watcher"
    consumes = (ALL_EVENTS,)

    def __init__(
        self,
        *,
        allow_link_local: bool = False,
        cluster: ClusterSync | None = None,
        resync_interval: float | None = None,
        leases: Leases | None = None,
    ) -> None:
        self.state = WatcherState()
        self.allow_link_local = allow_link_local
        self.runner: Runner | None = None
        self.cluster = cluster  # Kubernetes mode: the cluster in, status and finalizers out
        self.leases = leases  # several watcher replicas: each follows the kinds it holds a lease on (cluster.GROUPS)
        self.resync_interval = resync_interval
        self.rebuilt_count = 0
        self.rebuilt_builtin = 0  # of those, the built-in provider configs Jetway registered itself

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    def rebuilt(self) -> None:
        self.rebuilt_count = len(self.state.resources.items)
        self.rebuilt_builtin = sum(1 for state in self.state.resources.items.values() if state.registered)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        # Standalone, the watcher answers questions and records the built-in providers' registrations (a spec
        # has one writer: this service); in a cluster, each decision is written back as status.
        if self.cluster is None:
            registering = isinstance(envelope.event, ProviderRegistered) or envelope.key in self.state.registrations
            return (envelope.key,) if registering and envelope.facet in (SPEC, WORKLOAD) else ()
        if envelope.key.kind not in KINDS or envelope.facet == OBSERVED:
            return ()
        return (envelope.key,)

    def keys(self) -> Iterable[Key]:
        return list(self.state.resources.items) if self.cluster is not None else list(self.state.registrations)

    async def reconcile(self, key: Key, effects: Effects) -> None:
        if self.cluster is not None:
            await self.cluster.reconcile(key)
        else:
            await self._register(key)

    # --- bounded history: a deleted resource's subjects go after a grace period ---------------------

    async def _purging(self, runner: Runner) -> None:
        """Now and then, purge the history of what was deleted more than the grace period ago (and holds no
        objects any more): the watcher holding the kind does it, in a cluster. `deleted_grace` 0: never."""
        grace = runner.settings.streams.deleted_grace
        if not grace:
            await asyncio.Event().wait()
        while True:
            await asyncio.sleep(max(0.2, min(grace / 4, 3600.0)))
            try:
                await self.purge_deleted(runner, grace)
            except Exception as exc:  # NATS away: the next round tries again
                log.warning("purging deleted resources' history failed: %s", exc)

    async def purge_deleted(self, runner: Runner, grace: float) -> list[Key]:
        """One round; the resources whose history was purged. What was deleted is read from the stream (the last
        event of every spec facet), not kept in the projection, which forgets what is gone."""
        now = datetime.now(UTC)
        due: list[Key] = []

        def deletion(item: Item) -> None:  # a deletion long enough ago (purgeable checks again, with the facets)
            if isinstance(item, Envelope) and isinstance(item.event, ResourceDeleted) and history.aged(item, now, grace):
                due.append(item.key)

        await runner.store.scan(facet_filter(SPEC), deletion, last_per_subject=True)
        purged = []
        for key in due:
            if self.cluster is not None and not self.cluster.holds_kind(key.kind):
                continue  # another watcher replica holds its kind
            if history.purgeable(await runner.store.history(key), now, grace):  # else something stands: a later round
                await runner.js.purge_stream(EVENTS_STREAM, subject=key.history_filter())
                purged.append(key)
                log.info("history purged", extra={"resource": str(key)})
        return purged

    async def _register(self, key: Key) -> None:
        """Standalone: a built-in provider's registration recorded as applied, unless a user applied that config
        (then theirs stands); a registered one that differs is the built-in config upgraded. Deleted, it comes
        back, as the workload service re-creates it in a cluster."""
        registration = self.state.registrations.get(key)
        current = self.state.resources.items.get(key)
        if registration is None or (current is not None and not current.registered):
            return
        outcome = await self.apply(registration.manifest, dry_run=False, registered=True)
        if isinstance(outcome, Refused):  # a built-in config this version refuses: a bug, said loudly
            log.error("built-in provider %s not registered: %s", key.name, "; ".join(p.message for p in outcome.problems))

    async def record(self, key: Key, event: Event, facet: str) -> None:
        """Record what the cluster showed (Kubernetes mode): appended after the facet's last event."""
        assert self.runner is not None
        writes = self.runner.writes
        await writes.write(lambda: writes.append(key.subject(facet), event))

    # --- applying --------------------------------------------------------------------------

    def admit(self, doc: Any) -> tuple[Admission, ResourceState | None]:
        """Admission against what is stored (so update rules apply) and the providers folded."""
        first = admit(doc)
        if first.obj is None:
            return first, None
        current = self.state.resources.items.get(key_of(first.obj))
        known = Known(
            old=typed(current) if current is not None else None,
            recorded_provider=current.status().get("provider", {}).get("name") if current is not None else None,
            providers=self.known_provider,
            allow_link_local=self.allow_link_local,
        )
        return (judge(doc, known) if current is not None else judged(first, known)), current

    def known_provider(self, name: str) -> ProviderLookup:
        """The named provider as the projection knows it (registered providers are events like any other).
        Before any provider is known at all (a start-up still replaying), nothing can be said: a warning."""
        state = self.state.resources.items.get(Key("InferenceProviderConfig", "", name)) if name else None
        if state is None or state.deleting:
            if not any(k.kind == "InferenceProviderConfig" for k in self.state.resources.items):
                return ProviderLookup("unavailable", reason="no InferenceProviderConfig is registered yet")
            return ProviderLookup("not-found")
        config = stored("InferenceProviderConfig", name, "", state.spec)
        return ProviderLookup("found", spec=config.spec)  # type: ignore[attr-defined]

    async def apply(self, doc: Any, *, dry_run: bool, registered: bool = False) -> Applied | Refused:
        """Admit and record a manifest (`registered`: for a provider's self-registration, not a user)."""
        assert self.runner is not None
        try:
            outcome = await self.runner.writes.write(lambda: self._apply_once(doc, dry_run, registered))
        except Conflict:
            kept_changing = "the resource kept changing while being applied; try again"
            return Refused(409, [Problem(path="metadata.resourceVersion", message=kept_changing)])
        if isinstance(outcome, Refused):
            return outcome
        done, verdict, written = outcome
        return Applied(done.key, done.action, done.generation, done.previous_generation, done.expected_seq, list(verdict.warnings), written)

    async def _apply_once(self, doc: Any, dry_run: bool, registered: bool = False) -> tuple[Plan, Admission, int] | Refused:
        """One plan against the projection and its appends, with the sequence of the last event appended (0: none); a
        Conflict when the facet moved on meanwhile."""
        assert self.runner is not None
        verdict, current = self.admit(doc)
        if not verdict.ok or verdict.obj is None:
            return Refused(400, verdict.problems)
        if registered and current is not None and not current.registered:
            # judged under the lock: a user's config applied since the registration was read stands
            kept = Plan(key_of(verdict.obj), "unchanged", current.generation, current.generation, None, current.resource_version)
            return kept, verdict, 0
        requested = doc.get("metadata", {}).get("resourceVersion") if isinstance(doc.get("metadata"), dict) else None
        decision = plan(verdict.obj, current, requested_version=None if requested is None else str(requested), dry_run=dry_run)
        if isinstance(decision, Stale):
            return Refused(409, [Problem(path="metadata.resourceVersion", message=decision.message)])
        if decision.event is None:
            try:
                reported = await self._record_reported_status(decision.key, doc, dry_run)
            except EventTooLarge as exc:
                return Refused(413, [Problem(path="status", message=f"the status is too large to store: {too_large(exc)}")])
            if reported and decision.action == "unchanged":
                decision = Plan(decision.key, "configured", decision.generation, decision.previous_generation, None, decision.expected_seq)
            return decision, verdict, reported
        subject = decision.key.subject(SPEC)
        try:
            pending = self._reported_event(decision.key, doc, dry_run)
            if pending is not None:  # checked before the spec is stored: all or nothing
                self.runner.writes.check_fits(decision.key.subject(REPORTED), pending)
            event = msgspec.structs.replace(decision.event, registered=True) if registered else decision.event
            # after the facet's last sequence: the resource's version, or its deletion when re-created
            stored = await self.runner.writes.append(subject, event)
        except EventTooLarge as exc:
            return Refused(413, [Problem(path="", message=f"the manifest is too large to store: {too_large(exc)}")])
        reported = await self._record_reported_status(decision.key, doc, dry_run)  # after the spec: readers know the resource by then
        done = Plan(decision.key, decision.action, decision.generation, decision.previous_generation, decision.event, stored.seq)
        return done, verdict, reported or stored.seq

    def _reported_event(self, key: Key, doc: Any, dry_run: bool) -> StatusReported | None:
        """The provider's own status to record with this apply, None when there is nothing new."""
        status = doc.get("status") if isinstance(doc, dict) else None
        if key.kind not in REPORTING_KINDS or not isinstance(status, dict) or dry_run:
            return None
        fields = {k: v for k, v in status.items() if k in ("ready", "version", "lastHeartbeat", "upstreamCRDVersion")}
        current = self.state.resources.items.get(key)
        last = current.decision(REPORTED) if current else None
        if last is not None and last.status.fields == fields:
            return None
        return StatusReported(status=StatusSlice(fields=fields))

    async def _record_reported_status(self, key: Key, doc: Any, dry_run: bool) -> int:
        """Providers report their own readiness: the `status` of an applied provider config is recorded as theirs. The
        sequence it was stored at; 0 when there was nothing new to record."""
        assert self.runner is not None
        event = self._reported_event(key, doc, dry_run)
        if event is None:
            return 0
        return (await self.runner.writes.append(key.subject(REPORTED), event)).seq

    async def delete(self, key: Key) -> Deleted:
        assert self.runner is not None
        runner = self.runner

        async def delete_once() -> Deleted:
            current = self.state.resources.items.get(key)
            if current is None:
                return Deleted(key, False)
            event = ResourceDeleted(kind=key.kind, namespace=key.namespace, name=key.name)
            stored = await runner.writes.append(key.subject(SPEC), event, expected=current.resource_version)
            return Deleted(key, True, stored.seq)

        return await runner.writes.write(delete_once)

    async def alongside(self, runner: Runner) -> None:
        self.runner = runner
        if self.cluster is None:
            await self._purging(runner)
        elif self.leases is None:
            await asyncio.gather(self.cluster.run(), self._purging(runner))
        else:
            await asyncio.gather(self.cluster.run(hold_all=False), self.leases.run(), self._purging(runner))
