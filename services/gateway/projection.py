"""What the Gateway API control plane knows (Kubernetes mode): deployments, the Gateways they route through and the
providers' own InferencePools they may route to, as the watcher observed them.

`routing` is which Gateway each deployment routes through, from the service's own decisions; the shard of the
global partition folds them from every partition (`GatewayService.everywhere`), so it alone can decide each
Gateway's cross-namespace admission for all of them (`admitted`, recorded on the Gateway).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.cluster import OBSERVED, ApisDiscovered, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted
from contracts.gateway import GatewayReconciled, RoutesAdmitted
from contracts.gatewayapi import GatewayView
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected
from contracts.providerconfig import InferenceProviderConfigSpec
from contracts.subjects import SCALER, SELECTOR, SPEC, WORKLOAD, Key
from runtime import desired
from runtime.desired import Desired
from services.gateway.decide import ROUTING


@dataclass
class RoutedDeployment(Desired[ModelDeployment]):
    selection: ProviderSelected | None = None
    workload: Decision | None = None  # the workload service's last decision: phase, status.endpoint
    observed: dict[tuple[str, str], ObjectObserved] = field(default_factory=dict)  # (kind, name) → the cluster's last report
    scale: Decision | None = None  # the scaler's last decision: whether it is at zero (contracts/scaling.py)

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
class GatewayState:
    snapshot_version = 5  # runtime/snapshots.py: bump when what fold() keeps here changes (4: pools; 5: the scaler's count)

    deployments: dict[Key, RoutedDeployment] = field(default_factory=dict)
    providers: dict[str, InferenceProviderConfigSpec] = field(default_factory=dict)
    gateways: dict[str, GatewayView] = field(default_factory=dict)  # "namespace/name" → what the watcher saw
    pools: dict[str, ObjectObserved] = field(default_factory=dict)  # "namespace/name" → a provider's InferencePool seen
    discovered: ApisDiscovered | None = None
    routing: dict[Key, str] = field(default_factory=dict)  # deployment → "namespace/name" of the Gateway it routes through
    admitted: dict[str, RoutesAdmitted] = field(default_factory=dict)  # Gateway → its admission, as last decided

    def routed_through(self, gateway: str) -> list[Key]:
        return [key for key, ref in self.routing.items() if ref == gateway]

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
            and d.applied is not None
        )

    def fold(self, envelope: Envelope, owner: str) -> None:
        event, key = envelope.event, envelope.key
        if isinstance(event, ApisDiscovered):
            self.discovered = event
            return
        if key.kind == "Gateway":
            ref = f"{key.namespace}/{key.name}"
            if isinstance(event, ObjectObserved) and event.exists:
                self.gateways[ref] = GatewayView.of(key.namespace, key.name, event.summary)
            elif isinstance(event, ObjectObserved):
                self.gateways.pop(ref, None)
                self.admitted.pop(ref, None)
            elif envelope.facet == owner and isinstance(event, RoutesAdmitted):
                self.admitted[ref] = event
            return
        if key.kind == "InferencePool":  # a provider's own (Jetway's are observed on their deployment)
            if isinstance(event, ObjectObserved) and event.exists:
                self.pools[f"{key.namespace}/{key.name}"] = event
            elif isinstance(event, ObjectObserved):
                self.pools.pop(f"{key.namespace}/{key.name}", None)
            return
        if key.kind == "ModelDeployment" and envelope.facet == owner and isinstance(event, Decision):
            if isinstance(event, GatewayReconciled) and event.gateway and event.reason in ROUTING:
                self.routing[key] = event.gateway
            else:
                self.routing.pop(key, None)
        if key.kind == "InferenceProviderConfig":
            if envelope.facet == SPEC and isinstance(event, ResourceApplied):
                self.providers[key.name] = InferenceProviderConfigSpec.model_validate(event.spec)
            elif envelope.facet == SPEC and isinstance(event, ResourceDeleted):
                self.providers.pop(key.name, None)
            return
        if key.kind != "ModelDeployment" or desired.fold(self.deployments, envelope, owner, RoutedDeployment, ModelDeployment):
            return
        deployment = self.deployments.get(key)
        if deployment is None:
            return
        if envelope.facet == SELECTOR and isinstance(event, ProviderSelected):
            deployment.selection = event
        elif envelope.facet == WORKLOAD and isinstance(event, Decision):
            deployment.workload = event
        elif envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            deployment.observed[(event.object_kind, event.object_name)] = event
        elif envelope.facet == SCALER and isinstance(event, Decision):
            deployment.scale = event
