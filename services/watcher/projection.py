"""What the watcher knows: every resource with its composed status, what the cluster showed, and the
built-in providers' registrations.

Folded from every event, and forgetting what is gone: a deleted resource takes its state and what was
observed of its objects with it (an object reported gone after its owner went is dropped, not kept as a
"no longer exists" entry), so create-delete churn leaves nothing behind. How a resource is shown to users
(its view, its last probe time) is the front door's: services/console/projection.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.cluster import ApisDiscovered, ObjectObserved
from contracts.events import Envelope, ResourceDeleted
from contracts.pipeline import ProviderRegistered
from contracts.subjects import Key
from runtime.resources import Resources

OWNER_KINDS = ("ModelDeployment", "AgentDeployment")


@dataclass
class WatcherState:
    snapshot_version = 4  # runtime/snapshots.py: bump when what fold() keeps here changes (4: probe times went to the console)

    resources: Resources = field(default_factory=Resources)
    registrations: dict[Key, ProviderRegistered] = field(default_factory=dict)  # standalone: built-in providers asked for
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
        elif isinstance(event, ResourceDeleted) and envelope.key.kind in OWNER_KINDS:
            # a pre-existing claim it mounted is told again to a deployment of the same name created later (its
            # storage starts knowing nothing); the objects it owned are kept until the cluster reports them gone
            for seen in [k for k in self.observed if k[0] == envelope.key and (not self.observed[k].exists or self.observed[k].referenced)]:
                del self.observed[seen]
