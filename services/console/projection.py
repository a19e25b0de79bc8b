"""What the front door shows: every resource with its composed status, as users read it, and when each member
was last probed. Folded from every event by the console's own runner (in `jetway up` and in a cluster alike).

`probed_at` is the one field not folded from events: the router publishes a probe signal for every member at
every tick (contracts/router.py, core NATS), and a member's health is recorded as an event only when it changes.
Recording each probe instead would be one event per member per tick for every service to read, and would push
each member's health decision out of its facet's bounded history (JETWAY_HISTORY_PER_FACET). So it is a cache:
kept in snapshots, refilled for every member within one probe interval by a new replica, and until then
`last_reconciled_at` falls back on the member's last recorded decision. A deleted resource takes its probe time
with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.cluster import ApisDiscovered
from contracts.events import Envelope, ResourceDeleted
from contracts.kinds import KINDS, kind_of_token
from contracts.subjects import SPEC, Key, parse_subject
from runtime.resources import Resources, ResourceState


def rfc3339(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


@dataclass
class ConsoleState:
    snapshot_version = 1  # runtime/snapshots.py: bump when what fold() keeps here changes

    resources: Resources = field(default_factory=Resources)
    probed_at: dict[str, datetime] = field(default_factory=dict)  # spec subject → last probe (a signal, not an event)
    discovered: ApisDiscovered | None = None  # a cluster: what the API server serves (the providers' health checks)

    def fold(self, envelope: Envelope) -> None:
        self.resources.fold(envelope)
        event = envelope.event
        if isinstance(event, ApisDiscovered):
            self.discovered = event
        elif isinstance(event, ResourceDeleted):
            self.probed_at.pop(envelope.key.subject(), None)

    def probed(self, subject: str, at: datetime) -> None:
        """A probe signal: when the router last probed the member at this spec subject. Only for a resource
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
