"""The resources projection: what Jetway believes about every resource, folded from events.

Desired state comes from `spec` facets; status is composed from the latest decision of each
owner (service), each writing only its own slice: conditions merge by type, fields merge
by key, and the phase follows one precedence rule. Pure: no I/O. The apply API reads it,
`jetway replay` rebuilds it as of any sequence or time, the cluster status writer uses it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.cluster import DeletionRequested
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted, StatusCondition, Withdrawn
from contracts.kinds import KINDS
from contracts.subjects import BINDING, ROUTER, SELECTOR, SPEC, STORAGE, WORKLOAD, Key

# Whose phase wins when several owners report one (Failed from anyone wins over all).
PHASE_OWNERS = (WORKLOAD, BINDING, ROUTER, STORAGE, SELECTOR)
PHASED_KINDS = ("ModelDeployment", "AgentDeployment", "InferencePoolMember")


def _merge(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = _merge(dict(into[key]), value)
        else:
            into[key] = value
    return into


def condition_dict(condition: StatusCondition) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": condition.lastTransitionTime,
    }
    if condition.observedGeneration is not None:
        out["observedGeneration"] = condition.observedGeneration
    return out


@dataclass
class ResourceState:
    key: Key
    generation: int = 0
    spec: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    uid: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    resource_version: int = 0  # stream sequence of the last spec event
    registered: bool = False  # its spec was recorded for a provider's self-registration, not applied by a user
    decisions: dict[str, Envelope] = field(default_factory=dict)  # owner → its latest decision
    deleting: bool = False  # the cluster asked to delete it; its objects are being cleaned up

    @property
    def api_version(self) -> str:
        info = KINDS.get(self.key.kind)
        return info.api_version if info else ""

    def decision(self, owner: str) -> Decision | None:
        envelope = self.decisions.get(owner)
        return envelope.event if envelope is not None and isinstance(envelope.event, Decision) else None

    def conditions(self) -> list[StatusCondition]:
        merged: dict[str, StatusCondition] = {}
        for owner in sorted(self.decisions):
            decision = self.decision(owner)
            for condition in decision.status.conditions if decision else ():
                merged[condition.type] = condition
        return list(merged.values())

    def condition(self, type_: str) -> StatusCondition | None:
        return next((c for c in self.conditions() if c.type == type_), None)

    def phase(self) -> tuple[str, str | None]:
        """(phase, message): Terminating while being deleted, Failed from any owner, then owners by precedence, else Pending."""
        if self.deleting:
            return "Terminating", "deleting: cleaning up the objects Jetway created"
        slices = {owner: d.status for owner in self.decisions if (d := self.decision(owner)) is not None}
        for owner in sorted(slices):
            if slices[owner].phase == "Failed":
                return "Failed", slices[owner].message
        for owner in (*PHASE_OWNERS, *sorted(slices)):
            if owner in slices and slices[owner].phase:
                return str(slices[owner].phase), slices[owner].message
        return "Pending", None

    def readable_phase(self, status: dict[str, Any]) -> str:
        """A phase for every kind's status view (Airdress's StatusResponse has one): the phased kinds' own; a
        provider config's from the `ready` it reports (Ready, NotReady, or Pending before any report)."""
        if status.get("phase"):
            return str(status["phase"])
        if self.deleting:
            return "Terminating"
        ready = status.get("ready")
        return "Pending" if ready is None else ("Ready" if ready else "NotReady")

    def observed_generation(self) -> int | None:
        generations = [d.generation for owner in self.decisions if (d := self.decision(owner)) is not None and d.generation]
        return min(generations) if generations else None

    def last_reconciled_at(self) -> datetime | None:
        times = [e.time for e in self.decisions.values()]
        return max(times) if times else None

    def status(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for owner in sorted(self.decisions):
            decision = self.decision(owner)
            if decision is not None:
                _merge(fields, decision.status.fields)
        status: dict[str, Any] = dict(fields)
        if self.key.kind in PHASED_KINDS:
            phase, message = self.phase()
            status = {"phase": phase, **fields}
            if message:
                status["message"] = message
        conditions = self.conditions()
        if conditions:
            status["conditions"] = [condition_dict(c) for c in conditions]
        observed = self.observed_generation()
        if observed is not None:
            status["observedGeneration"] = observed
        return status

    def manifest(self) -> dict[str, Any]:
        """The resource as `kubectl get -o yaml` would show it."""
        metadata: dict[str, Any] = {"name": self.key.name}
        if self.key.namespace:
            metadata["namespace"] = self.key.namespace
        metadata.update({"generation": self.generation, "resourceVersion": str(self.resource_version)})
        if self.uid:
            metadata["uid"] = self.uid
        if self.created_at:
            metadata["creationTimestamp"] = self.created_at.isoformat().replace("+00:00", "Z")
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {"apiVersion": self.api_version, "kind": self.key.kind, "metadata": metadata, "spec": self.spec, "status": self.status()}


@dataclass
class Resources:
    """Every resource, folded from the spec facets and the decisions about it."""

    items: dict[Key, ResourceState] = field(default_factory=dict)
    last_seq: int = 0
    last_time: datetime | None = None

    def fold(self, envelope: Envelope) -> None:
        self.last_seq = max(self.last_seq, envelope.seq)
        # Times are the producer's (`time`, in the event), never the stream's `stored_at`: an event its writer folds
        # at once has no stored_at yet, so a replay would otherwise disagree with the live state (creationTimestamp).
        self.last_time = envelope.time
        event, key = envelope.event, envelope.key
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                state = self.items.get(key) or ResourceState(key, created_at=envelope.time)
                state.generation = event.generation
                state.spec = event.spec
                state.labels = dict(event.labels)
                state.annotations = dict(event.annotations)
                state.uid = event.uid or state.uid
                if event.created_at:
                    state.created_at = datetime.fromisoformat(event.created_at)
                state.updated_at = envelope.time
                state.resource_version = envelope.seq
                state.registered = event.registered
                self.items[key] = state
            elif isinstance(event, DeletionRequested) and key in self.items:
                self.items[key].deleting = True
            elif isinstance(event, ResourceDeleted):
                self.items.pop(key, None)
            return
        known = self.items.get(key)
        if known is None:
            return  # a decision about a resource that no longer exists (or not yet, in a partial replay)
        if isinstance(event, Withdrawn):
            known.decisions.pop(envelope.facet, None)
        elif isinstance(event, Decision):
            known.decisions[envelope.facet] = envelope

    def fold_all(self, envelopes: Iterable[Envelope]) -> Resources:
        for envelope in envelopes:
            self.fold(envelope)
        return self

    def of_kind(self, kind: str) -> list[ResourceState]:
        return sorted((s for k, s in self.items.items() if k.kind == kind), key=lambda s: (s.key.namespace, s.key.name))
