"""What the scaler knows: each deployment (its autoscaling, the provider chosen for it, its last decision), folded
from events; and, beside them, what the router says of its load lately (`Live`), which is no event: it is kept in
memory only, never snapshotted, and a restart starts it afresh (a down delay under way starts over)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from contracts.events import Decision, Envelope
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected
from contracts.scaling import Demand, MemberLoad, autoscaling_of
from contracts.subjects import SCALER, SELECTOR, WORKLOAD, Key
from runtime import desired
from runtime.desired import Desired
from services.scaler.decide import Load, Window

SELF = SCALER
KIND = "ModelDeployment"


@dataclass
class Scaled(Desired[ModelDeployment]):
    provider: str | None = None  # the selector's choice: what the provider can do with a count
    ready: int = 0  # replicas ready to serve, as the workload service last reported them (0 standalone: no pods)

    @property
    def autoscaled(self) -> bool:
        return self.applied is not None and autoscaling_of(self.applied) is not None

    def chosen(self) -> str | None:
        """The provider: the one the manifest names, else the selector's."""
        named = self.applied.spec.provider.name if self.applied is not None and self.applied.spec.provider else None
        return named or self.provider


@dataclass
class Live:
    """The router's latest readings for one deployment, each with when it arrived (by the scaler's clock: the
    routers' own clocks are never compared with it), and the stretch the down delay is counting."""

    loads: dict[tuple[str, str], tuple[MemberLoad, datetime]] = field(default_factory=dict)  # (member, router) → reading
    demand: dict[str, tuple[Demand, datetime]] = field(default_factory=dict)  # router → what it holds
    window: Window = field(default_factory=Window)

    def load(self, now: datetime, stale_after: float, *, serving: int = 0) -> Load:
        """The deployment's load from the readings fresher than `stale_after` seconds (older ones are forgotten)."""
        for where in [k for k, (_, at) in self.loads.items() if (now - at).total_seconds() > stale_after]:
            del self.loads[where]
        for router in [r for r, (_, at) in self.demand.items() if (now - at).total_seconds() > stale_after]:
            del self.demand[router]
        freshest: dict[str, MemberLoad] = {}  # per member, the latest reading of its engine's gauges, whichever router's
        for (member, _), (reading, _at) in sorted(self.loads.items(), key=lambda item: item[1][1]):
            freshest[member] = reading
        readings = [reading for reading in freshest.values() if reading.healthy]

        def mean(values: list[float]) -> float | None:
            return sum(values) / len(values) if values else None

        return Load(
            members=len(readings),
            serving=serving,
            waiting=mean([float(r.waiting) for r in readings if r.waiting is not None]),
            running=mean([float(r.running) for r in readings if r.running is not None]),
            kv=mean([r.kv for r in readings if r.kv is not None]),
            in_flight=sum(reading.in_flight for reading, _ in self.loads.values()),  # each router's own count
            held=sum(demand.held for demand, _ in self.demand.values()),
        )


def deployment_key(text: str) -> Key | None:
    """The deployment a signal names ("namespace/name"); None for a member no deployment owns."""
    namespace, _, name = text.partition("/")
    return Key(KIND, namespace, name) if namespace and name else None


@dataclass
class ScalerState:
    snapshot_version = 1  # runtime/snapshots.py: bump when what fold() keeps here changes
    snapshot_skip = ("live",)  # measurements, not events

    deployments: dict[Key, Scaled] = field(default_factory=dict)
    live: dict[Key, Live] = field(default_factory=dict)

    def fold(self, envelope: Envelope) -> None:
        if envelope.key.kind != KIND:
            return
        if desired.fold(self.deployments, envelope, SELF, Scaled, ModelDeployment):
            if envelope.key not in self.deployments:
                self.live.pop(envelope.key, None)
            return
        deployment, event = self.deployments.get(envelope.key), envelope.event
        if deployment is None:
            return
        if envelope.facet == SELECTOR and isinstance(event, ProviderSelected):
            deployment.provider = event.provider
        elif envelope.facet == WORKLOAD and isinstance(event, Decision):
            replicas = event.status.fields.get("replicas")
            ready = replicas.get("ready") if isinstance(replicas, dict) else None
            deployment.ready = ready if isinstance(ready, int) else 0

    def live_of(self, key: Key) -> Live:
        return self.live.setdefault(key, Live())

    def measured(self, reading: MemberLoad, now: datetime) -> bool:
        """Keep a member's reading for its deployment, when this projection knows that deployment autoscaled."""
        key = deployment_key(reading.deployment)
        deployment = self.deployments.get(key) if key is not None else None
        if key is None or deployment is None or not deployment.autoscaled:
            return False
        self.live_of(key).loads[(reading.member, reading.router)] = (reading, now)
        return True

    def held(self, demand: Demand, now: datetime) -> bool:
        """Keep what a router holds for a deployment, when this projection knows that deployment autoscaled."""
        key = deployment_key(demand.deployment)
        deployment = self.deployments.get(key) if key is not None else None
        if key is None or deployment is None or not deployment.autoscaled:
            return False
        self.live_of(key).demand[demand.router] = (demand, now)
        return True
