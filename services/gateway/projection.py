"""What the gateway knows: every member, its last recorded health, and live traffic state.

`Members` and `GatewayApiState` are folded from events and forget what is deleted. `Members.traffic`
is the one part that is not, and it stays out of the log (and out of snapshots) on purpose:
`outstanding` counts this process's requests in flight, which another replica's router does not carry
and a restart does not have; `failed` marks a member that failed a request since its last probe, and is
superseded by a probe before a new process routes at all (its start-up pass probes every member and
records health when it changed, before the router listens). What a user sees of a member (its health,
phase, advertised models) is the recorded `MemberHealthChanged`, which a hand-over keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.admission import stored
from contracts.cluster import OBSERVED, ApisDiscovered, DeletionRequested, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted, Withdrawn
from contracts.gateway import GatewayReconciled, MemberHealthChanged
from contracts.gatewayapi import GatewayView
from contracts.modeldeployment import ModelDeployment
from contracts.objects import PAUSED
from contracts.pipeline import ProviderSelected
from contracts.poolmember import InferencePoolMemberSpec
from contracts.providerconfig import InferenceProviderConfigSpec
from contracts.subjects import SELECTOR, SPEC, WORKLOAD, Key

# A change to any of these means the last probe no longer speaks for the member.
CONNECTION_FIELDS = ("backend", "url", "authSecretRef", "caFileRef", "transport", "computeOperatorRef")


@dataclass
class Member:
    key: Key
    generation: int
    spec: InferencePoolMemberSpec
    health: MemberHealthChanged | None = None
    probed_generation: int = 0  # the generation a health decision was last recorded for
    needs_probe: bool = True  # new, re-pointed or un-drained: not routable before a fresh probe

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def declared(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.spec.models)

    def window(self, model: str) -> int | None:
        for declared in self.spec.models:
            if declared.name == model:
                return declared.contextWindow or None  # 0 is "no hint"
        return None


@dataclass
class Traffic:
    """Live, per-process state: not a fact, never an event (see the module's docstring)."""

    outstanding: int = 0
    failed: bool = False  # failed mid-request; cleared by the next successful probe


@dataclass
class Members:
    snapshot_version = 1  # runtime/snapshots.py: bump when what fold() keeps here changes
    snapshot_skip = ("traffic",)  # live, per process: a restart starts with no request in flight

    items: dict[Key, Member] = field(default_factory=dict)
    traffic: dict[Key, Traffic] = field(default_factory=dict)
    by_model: dict[str, set[Key]] = field(default_factory=dict)

    def _index(self) -> None:
        index: dict[str, set[Key]] = {}
        for key, member in self.items.items():
            for model in member.declared:
                index.setdefault(model, set()).add(key)
        self.by_model = index

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                spec = InferencePoolMemberSpec.model_validate(event.spec)
                old = self.items.get(key)
                member = Member(key, event.generation, spec)
                if old is not None:
                    member.health, member.probed_generation = old.health, old.probed_generation
                    repointed = any(getattr(old.spec, f) != getattr(spec, f) for f in CONNECTION_FIELDS)
                    undrained = old.spec.draining and not spec.draining
                    member.needs_probe = old.needs_probe or repointed or undrained
                self.items[key] = member
                self.traffic.setdefault(key, Traffic())
            elif isinstance(event, ResourceDeleted):
                self.items.pop(key, None)
                self.traffic.pop(key, None)  # a request still in flight holds its own reference
            self._index()
        elif isinstance(event, MemberHealthChanged):
            probed = self.items.get(key)
            if probed is not None and event.generation >= probed.probed_generation:
                probed.health = event
                probed.probed_generation = event.generation
                if event.generation == probed.generation:
                    probed.needs_probe = False

    def traffic_of(self, key: Key) -> Traffic:
        """A member's traffic; for a member no longer known, a counter that is not kept."""
        found = self.traffic.get(key)
        if found is None:
            found = Traffic()
            if key in self.items:
                self.traffic[key] = found
        return found


# --- the control plane (Kubernetes mode): deployments and the Gateways they route through ---------


@dataclass
class RoutedDeployment:
    key: Key
    generation: int = 0
    uid: str = ""
    md: ModelDeployment | None = None  # None once deleted (kept until its objects are withdrawn)
    paused: bool = False
    deleting: bool = False
    selection: ProviderSelected | None = None
    workload: Decision | None = None  # the workload service's last decision: phase, status.endpoint
    observed: dict[tuple[str, str], ObjectObserved] = field(default_factory=dict)  # (kind, name) → the cluster's last report
    last: Decision | None = None  # this service's last decision

    @property
    def running(self) -> bool:
        return self.workload is not None and self.workload.status.phase == "Running"

    @property
    def service_ip(self) -> str:
        """The model Service's cluster IP, as the watcher observed it ("" unknown)."""
        seen = self.observed.get(("Service", self.key.name))
        return str(seen.summary.get("clusterIP") or "") if seen is not None and seen.exists else ""

    @property
    def endpoint(self) -> dict[str, Any] | None:
        found = self.workload.status.fields.get("endpoint") if self.workload else None
        return found if isinstance(found, dict) else None


@dataclass
class GatewayApiState:
    snapshot_version = 1  # runtime/snapshots.py: bump when what fold() keeps here changes

    deployments: dict[Key, RoutedDeployment] = field(default_factory=dict)
    providers: dict[str, InferenceProviderConfigSpec] = field(default_factory=dict)
    gateways: dict[str, GatewayView] = field(default_factory=dict)  # "namespace/name" → what the watcher saw
    discovered: ApisDiscovered | None = None

    def apis(self) -> bool:
        found = self.discovered
        return found is not None and found.serves_inference_gateway()

    @staticmethod
    def routes_to(d: RoutedDeployment, gateway: str) -> bool:
        """Whether the deployment's HTTPRoute attaches to `gateway` now."""
        last = d.last
        return (
            isinstance(last, GatewayReconciled)
            and last.gateway == gateway
            and last.reason == "GatewayConfigured"
            and not d.deleting
            and d.md is not None
        )

    def fold(self, envelope: Envelope, owner: str) -> None:
        event, key = envelope.event, envelope.key
        if isinstance(event, ApisDiscovered):
            self.discovered = event
            return
        if key.kind == "Gateway" and isinstance(event, ObjectObserved):
            ref = f"{key.namespace}/{key.name}"
            if event.exists:
                self.gateways[ref] = GatewayView.of(key.namespace, key.name, event.summary)
            else:
                self.gateways.pop(ref, None)
            return
        if key.kind == "InferenceProviderConfig":
            if envelope.facet == SPEC and isinstance(event, ResourceApplied):
                self.providers[key.name] = InferenceProviderConfigSpec.model_validate(event.spec)
            elif envelope.facet == SPEC and isinstance(event, ResourceDeleted):
                self.providers.pop(key.name, None)
            return
        if key.kind != "ModelDeployment":
            return
        deployment = self.deployments.get(key)
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                deployment = deployment or RoutedDeployment(key)
                md = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
                assert isinstance(md, ModelDeployment)
                deployment.md, deployment.generation, deployment.uid = md, event.generation, event.uid
                deployment.paused = event.annotations.get(PAUSED) == "true"
                self.deployments[key] = deployment
            elif isinstance(event, DeletionRequested) and deployment is not None:
                deployment.deleting = True
            elif isinstance(event, ResourceDeleted) and deployment is not None:
                deployment.md = None
                if not (deployment.last and deployment.last.holds_objects()):
                    self.deployments.pop(key, None)
            return
        if deployment is None:
            return
        if envelope.facet == SELECTOR and isinstance(event, ProviderSelected):
            deployment.selection = event
        elif envelope.facet == WORKLOAD and isinstance(event, Decision):
            deployment.workload = event
        elif envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            deployment.observed[(event.object_kind, event.object_name)] = event
        elif envelope.facet == owner and isinstance(event, Decision):
            deployment.last = event
            if isinstance(event, Withdrawn) and deployment.md is None:
                self.deployments.pop(key, None)
