"""What the watcher knows: every resource with its composed status, and when members were last probed.

Folded from every event, and forgetting what is gone: a deleted resource takes its state, its probe
time and what was observed of its objects with it (an object reported gone after its owner went is
dropped, not kept as a "no longer exists" entry), so create-delete churn leaves nothing behind.

`probed_at` is the one field not folded from events: the gateway publishes a probe signal for every
member at every tick (contracts/router.py, core NATS, every watcher replica subscribed), and a member's
health is recorded as an event only when it changes. Recording each probe instead would be one event
per member per tick for every service to read, and would push each member's health decision out of its
facet's bounded history (JETWAY_HISTORY_PER_FACET). So it is a cache: kept in snapshots, refilled for
every member within one probe interval by a new replica, and until then `last_reconciled_at` falls back
on the member's last recorded decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.cluster import ApisDiscovered, ObjectObserved
from contracts.events import Envelope, ResourceDeleted
from contracts.kinds import KINDS, kind_of_token
from contracts.pipeline import ProviderRegistered
from contracts.subjects import SPEC, Key, parse_subject
from runtime.resources import Resources, ResourceState

OWNER_KINDS = ("ModelDeployment", "AgentDeployment")


def rfc3339(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


@dataclass
class WatcherState:
    snapshot_version = 3  # runtime/snapshots.py: bump when what fold() keeps here changes

    resources: Resources = field(default_factory=Resources)
    registrations: dict[Key, ProviderRegistered] = field(default_factory=dict)  # standalone: built-in providers asked for
    probed_at: dict[str, datetime] = field(default_factory=dict)  # spec subject → last probe (a signal, not an event)
    # Kubernetes mode: what was last recorded from the cluster, so only changes are recorded again
    discovered: ApisDiscovered | None = None
    observed: dict[tuple[Key, str, str], ObjectObserved] = field(default_factory=dict)  # (key, kind, name) → last observation

    def fold(self, envelope: Envelope) -> None:
        self.resources.fold(envelope)
        event = envelope.event
        if isinstance(event, ApisDiscovered):
            self.discovered = event
        elif isinstance(event, ProviderRegistered):
            self.registrations[envelope.key] = event
        elif isinstance(event, ObjectObserved):
            where = (envelope.key, event.object_kind, event.object_name)
            if event.exists or event.referenced:
                self.observed[where] = event
            else:
                # gone: nothing to compare against any more (an object never seen and one seen gone are recorded
                # alike, not at all); most often an owned object garbage-collected after its owner was deleted
                self.observed.pop(where, None)
        elif isinstance(event, ResourceDeleted):
            self.probed_at.pop(envelope.key.subject(), None)
            if envelope.key.kind in OWNER_KINDS:
                # a pre-existing claim it mounted is told again to a deployment of the same name created later (its
                # storage starts knowing nothing); the objects it owned are kept until the cluster reports them gone
                for seen in [
                    k for k in self.observed if k[0] == envelope.key and (not self.observed[k].exists or self.observed[k].referenced)
                ]:
                    del self.observed[seen]

    def probed(self, subject: str, at: datetime) -> None:
        """A probe signal: when the gateway last probed the member at this spec subject. Only for a resource
        that exists (a signal of a member's last probe may come after its deletion)."""
        try:
            parsed = parse_subject(subject)
            key = Key(kind_of_token(parsed.kind_token), parsed.namespace, parsed.name)
        except (ValueError, KeyError):
            return
        if parsed.facet == SPEC and key in self.resources.items:
            self.probed_at[subject] = at

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
                "phase": state.readable_phase(status),
                "conditions": status.get("conditions", []),
                "last_reconciled_at": rfc3339(self.last_reconciled_at(state)),
            }
        )
        if status.get("message"):
            body["message"] = status["message"]
        return body
