"""The watcher service: folds every event into the resources projection and records applies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from contracts.admission import Admission, admit
from contracts.events import Envelope, ResourceDeleted, StatusReported, StatusSlice
from contracts.gateway import PROBE_SIGNALS, ProbeSignal
from contracts.kinds import KINDS
from contracts.meta import WireModel
from contracts.poolmember import InferencePoolMember
from contracts.problems import Problem
from contracts.rules.urls import refused_address, url_host
from contracts.subjects import ALL_EVENTS, SPEC, Key
from runtime.eventstore import Conflict
from runtime.resources import ResourceState
from runtime.service import Runner, Service
from services.watcher.apply import Plan, Stale, key_of, plan
from services.watcher.projection import WatcherState

log = logging.getLogger("jetway.watcher")
REPORTED = "reported"  # the facet of a status a provider config was applied with
REPORTING_KINDS = ("InferenceProviderConfig", "AgentProviderConfig")


@dataclass(frozen=True)
class Refused:
    status: int
    problems: list[Problem]


@dataclass(frozen=True)
class Deleted:
    key: Key
    found: bool


class WatcherService(Service):
    name = "watcher"
    consumes = (ALL_EVENTS,)

    def __init__(self, *, allow_link_local: bool = False) -> None:
        self.state = WatcherState()
        self.allow_link_local = allow_link_local
        self.runner: Runner | None = None
        self._lock = asyncio.Lock()  # applies are serialised: each plan sees the one before it
        self.rebuilt_count = 0

    def fold(self, envelope: Envelope) -> None:
        self.state.resources.fold(envelope)

    def rebuilt(self) -> None:
        self.rebuilt_count = len(self.state.resources.items)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        return ()  # standalone, the watcher has nothing to reconcile: it only answers questions

    # --- applying --------------------------------------------------------------------------

    def _typed(self, state: ResourceState) -> WireModel:
        doc = state.manifest()
        doc.pop("status", None)
        doc["metadata"] = {k: v for k, v in doc["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
        return KINDS[state.key.kind].model.model_validate(doc)

    def _policy(self, obj: WireModel) -> list[Problem]:
        """Apply-time policy beyond the contract: addresses Jetway refuses to dial."""
        if isinstance(obj, InferencePoolMember) and obj.spec.url:
            why = refused_address(url_host(obj.spec.url), allow_link_local=self.allow_link_local)
            if why:
                return [Problem(path="spec.url", message=f"{why}; Jetway does not dial it unless started with --allow-link-local")]
        return []

    def admit(self, doc: Any) -> tuple[Admission, ResourceState | None]:
        """Admission against what is stored (so update rules apply)."""
        first = admit(doc)
        if first.obj is None:
            return first, None
        current = self.state.resources.items.get(key_of(first.obj))
        verdict = admit(doc, old=self._typed(current)) if current is not None else first
        if verdict.obj is not None:
            verdict.problems += self._policy(verdict.obj)
        return verdict, current

    async def apply(self, doc: Any, *, dry_run: bool) -> tuple[Plan, Admission] | Refused:
        assert self.runner is not None
        async with self._lock:
            for _ in range(3):
                verdict, current = self.admit(doc)
                if not verdict.ok or verdict.obj is None:
                    return Refused(400, verdict.problems)
                requested = doc.get("metadata", {}).get("resourceVersion") if isinstance(doc.get("metadata"), dict) else None
                decision = plan(verdict.obj, current, requested_version=None if requested is None else str(requested), dry_run=dry_run)
                if isinstance(decision, Stale):
                    return Refused(409, [Problem(path="metadata.resourceVersion", message=decision.message)])
                if decision.event is None:
                    reported = await self._record_reported_status(decision.key, doc, dry_run)
                    if reported and decision.action == "unchanged":
                        decision = Plan(
                            decision.key, "configured", decision.generation, decision.previous_generation, None, decision.expected_seq
                        )
                    return decision, verdict
                subject = decision.key.subject(SPEC)
                try:
                    # the facet's last sequence: the resource's version, or its deletion when re-created
                    stored = await self.runner.store.append(subject, decision.event, expected_seq=self.runner.seen.get(subject, 0))
                except Conflict:  # another writer (another watcher replica) got there first: plan again
                    await self.runner.refresh(subject)
                    continue
                self.runner.fold(stored)
                await self._record_reported_status(decision.key, doc, dry_run)  # after the spec: readers know the resource by then
                return Plan(
                    decision.key, decision.action, decision.generation, decision.previous_generation, decision.event, stored.seq
                ), verdict
            return Refused(
                409, [Problem(path="metadata.resourceVersion", message="the resource kept changing while being applied; try again")]
            )

    async def _record_reported_status(self, key: Key, doc: Any, dry_run: bool) -> bool:
        """Providers report their own readiness: the `status` of an applied provider config is recorded as theirs."""
        assert self.runner is not None
        status = doc.get("status") if isinstance(doc, dict) else None
        if key.kind not in REPORTING_KINDS or not isinstance(status, dict) or dry_run:
            return False
        fields = {k: v for k, v in status.items() if k in ("ready", "version", "lastHeartbeat", "upstreamCRDVersion")}
        current = self.state.resources.items.get(key)
        last = current.decision(REPORTED) if current else None
        if last is not None and last.status.fields == fields:
            return False
        subject = key.subject(REPORTED)
        stored = await self.runner.store.append(
            subject, StatusReported(status=StatusSlice(fields=fields)), expected_seq=self.runner.seen.get(subject, 0)
        )
        self.runner.fold(stored)
        return True

    async def delete(self, key: Key) -> Deleted:
        assert self.runner is not None
        async with self._lock:
            for _ in range(3):
                current = self.state.resources.items.get(key)
                if current is None:
                    return Deleted(key, False)
                event = ResourceDeleted(kind=key.kind, namespace=key.namespace, name=key.name)
                try:
                    stored = await self.runner.store.append(key.subject(SPEC), event, expected_seq=current.resource_version)
                except Conflict:
                    await self.runner.refresh(key.subject(SPEC))
                    continue
                self.runner.fold(stored)
                return Deleted(key, True)
            raise Conflict(key.subject(SPEC), 0, None)

    # --- alongside: the probe signals ------------------------------------------------------

    async def alongside(self, runner: Runner) -> None:
        self.runner = runner
        decoder = msgspec.json.Decoder(ProbeSignal)

        async def probed(msg: Any) -> None:
            with contextlib.suppress(msgspec.DecodeError, ValueError):
                signal = decoder.decode(msg.data)
                self.state.probed_at[signal.subject] = signal.at

        sub = await runner.nc.subscribe(PROBE_SIGNALS, cb=probed)
        try:
            await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
