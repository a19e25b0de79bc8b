"""What the watcher knows: every resource with its composed status, and when members were last probed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.cluster import ApisDiscovered, ObjectObserved
from contracts.events import Envelope, ResourceDeleted
from contracts.kinds import KINDS
from contracts.subjects import Key
from runtime.resources import Resources, ResourceState

OWNER_KINDS = ("ModelDeployment", "AgentDeployment")


def rfc3339(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


@dataclass
class WatcherState:
    resources: Resources = field(default_factory=Resources)
    probed_at: dict[str, datetime] = field(default_factory=dict)  # spec subject → last probe (not an event)
    # Kubernetes mode: what was last recorded from the cluster, so only changes are recorded again
    discovered: ApisDiscovered | None = None
    observed: dict[tuple[Key, str, str], ObjectObserved] = field(default_factory=dict)  # (key, kind, name) → last observation

    def fold(self, envelope: Envelope) -> None:
        self.resources.fold(envelope)
        event = envelope.event
        if isinstance(event, ApisDiscovered):
            self.discovered = event
        elif isinstance(event, ObjectObserved):
            self.observed[(envelope.key, event.object_kind, event.object_name)] = event
        elif isinstance(event, ResourceDeleted) and envelope.key.kind in OWNER_KINDS:
            # gone with its owner: nothing left to compare against; and a pre-existing claim it mounted is told
            # again to a deployment of the same name created later (its storage starts knowing nothing)
            for seen in [k for k in self.observed if k[0] == envelope.key and (not self.observed[k].exists or self.observed[k].referenced)]:
                del self.observed[seen]

    def last_reconciled_at(self, state: ResourceState) -> datetime | None:
        times = [t for t in (state.last_reconciled_at(), self.probed_at.get(state.key.subject())) if t is not None]
        return max(times) if times else None

    def view(self, state: ResourceState) -> dict[str, Any]:
        """A resource as the Airdress resource plane shows it (the CLI's ResourceView)."""
        status = state.status()
        last = rfc3339(self.last_reconciled_at(state))
        metadata: dict[str, Any] = {"name": state.key.name}
        if KINDS[state.key.kind].namespaced:
            metadata["namespace"] = state.key.namespace
        metadata.update(
            {
                "generation": state.generation,
                "observed_generation": status.get("observedGeneration"),
                "resourceVersion": str(state.resource_version),
                "uid": state.uid,
                "labels": state.labels,
                "annotations": state.annotations,
                "created_at": rfc3339(state.created_at),
                "updated_at": rfc3339(state.updated_at),
                "last_reconciled_at": last,
            }
        )
        if last:
            status["lastReconciledAt"] = last
        return {"apiVersion": state.api_version, "kind": state.key.kind, "metadata": metadata, "spec": state.spec, "status": status}

    def status_view(self, state: ResourceState) -> dict[str, Any]:
        status = state.status()
        body: dict[str, Any] = {"kind": state.key.kind, "name": state.key.name}
        if KINDS[state.key.kind].namespaced:
            body["namespace"] = state.key.namespace
        body.update(
            {
                "generation": state.generation,
                "observed_generation": status.get("observedGeneration"),
                "phase": status.get("phase"),
                "conditions": status.get("conditions", []),
                "last_reconciled_at": rfc3339(self.last_reconciled_at(state)),
            }
        )
        if status.get("message"):
            body["message"] = status["message"]
        return body
