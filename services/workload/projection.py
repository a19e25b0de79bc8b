"""What the workload service knows: each deployment, its selection and storage plan, its last render."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.cluster import ApisDiscovered, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import (
    ImageResolution,
    ProviderSelected,
    RenderFailed,
    SelectionFailed,
    StorageInvalid,
    StoragePlanned,
    WorkloadRendered,
    WorkloadWithdrawn,
)
from contracts.subjects import OBSERVED, SCALER, SELECTOR, SPEC, STORAGE, WORKLOAD, Key
from runtime import desired
from runtime.desired import Desired

SELF = WORKLOAD


@dataclass
class Deployment(Desired[ModelDeployment]):
    selection: ProviderSelected | SelectionFailed | None = None
    storage: StoragePlanned | StorageInvalid | None = None
    rendered: WorkloadRendered | None = None  # the objects it stands for now (until withdrawn)
    observed: dict[tuple[str, str], ObjectObserved] = field(default_factory=dict)  # (kind, name) → the cluster's last report
    image: ImageResolution | None = None  # Direct vLLM: the image's last resolution (reused while requested is unchanged)
    scale: Decision | None = None  # the scaler's last decision (contracts/scaling.py): the count an autoscaled one runs at

    def holding(self) -> bool:
        return self.rendered is not None  # a failed render after a render leaves the rendered objects standing

    def decided(self, decision: Decision) -> None:
        super().decided(decision)
        if isinstance(decision, WorkloadRendered | RenderFailed) and decision.image is not None:
            self.image = decision.image
        if isinstance(decision, WorkloadRendered):
            self.rendered = decision
        elif isinstance(decision, WorkloadWithdrawn):
            self.rendered = None


@dataclass
class ProviderConfig:
    generation: int
    spec: dict[str, object]
    labels: dict[str, str]
    annotations: dict[str, str]
    uid: str
    reported: Decision | None = None  # this service's readiness report
    registered: bool = False  # its spec was recorded for our registration (standalone), not applied by a user


@dataclass
class WorkloadState:
    snapshot_version = 4  # runtime/snapshots.py: bump when what fold() keeps here changes (4: the scaler's count)

    deployments: dict[Key, Deployment] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    discovered: ApisDiscovered | None = None  # what the cluster serves (Kubernetes mode)

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if isinstance(event, ApisDiscovered):
            self.discovered = event
            return
        if key.kind == "InferenceProviderConfig":
            if envelope.facet == SPEC and isinstance(event, ResourceApplied):
                old = self.providers.get(key.name)
                self.providers[key.name] = ProviderConfig(
                    event.generation,
                    event.spec,
                    event.labels,
                    event.annotations,
                    event.uid,
                    reported=old.reported if old else None,
                    registered=event.registered,
                )
            elif envelope.facet == SPEC and isinstance(event, ResourceDeleted):
                self.providers.pop(key.name, None)
            elif envelope.facet == SELF and isinstance(event, Decision) and key.name in self.providers:
                self.providers[key.name].reported = event
            return
        if desired.fold(self.deployments, envelope, SELF, Deployment, ModelDeployment):
            return
        deployment = self.deployments.get(key)
        if deployment is None:
            return
        if envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            deployment.observed[(event.object_kind, event.object_name)] = event
        elif envelope.facet == SELECTOR and isinstance(event, ProviderSelected | SelectionFailed):
            deployment.selection = event
        elif envelope.facet == STORAGE and isinstance(event, StoragePlanned | StorageInvalid):
            deployment.storage = event
        elif envelope.facet == SCALER and isinstance(event, Decision):
            deployment.scale = event
