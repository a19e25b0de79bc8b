"""What the workload service knows: each deployment, its selection and storage plan, its last render."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.admission import stored
from contracts.cluster import ApisDiscovered, DeletionRequested, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted
from contracts.modeldeployment import ModelDeployment
from contracts.objects import PAUSED
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
from contracts.subjects import OBSERVED, SELECTOR, SPEC, STORAGE, WORKLOAD, Key

SELF = WORKLOAD


@dataclass
class Deployment:
    key: Key
    generation: int = 0
    uid: str = ""
    md: ModelDeployment | None = None  # None once deleted (kept until its objects are withdrawn)
    paused: bool = False
    selection: ProviderSelected | SelectionFailed | None = None
    storage: StoragePlanned | StorageInvalid | None = None
    last: Decision | None = None  # this service's last decision about it
    rendered: WorkloadRendered | None = None  # the objects it stands for now (until withdrawn)
    deleting: bool = False  # the cluster asked to delete it: objects go first
    observed: dict[tuple[str, str], ObjectObserved] = field(default_factory=dict)  # (kind, name) → the cluster's last report
    image: ImageResolution | None = None  # Direct vLLM: the image's last resolution (reused while requested is unchanged)


@dataclass
class ProviderConfig:
    generation: int
    spec: dict[str, object]
    labels: dict[str, str]
    annotations: dict[str, str]
    uid: str
    reported: Decision | None = None  # this service's readiness report


@dataclass
class WorkloadState:
    snapshot_version = 1  # runtime/snapshots.py: bump when what fold() keeps here changes

    deployments: dict[Key, Deployment] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    discovered: ApisDiscovered | None = None  # what the cluster serves (Kubernetes mode)
    registered_by: dict[str, str] = field(default_factory=dict)  # provider → who wrote its current spec (a producer)

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if isinstance(event, ApisDiscovered):
            self.discovered = event
            return
        if key.kind == "InferenceProviderConfig":
            if envelope.facet == SPEC:
                self.registered_by[key.name] = envelope.producer
            if envelope.facet == SPEC and isinstance(event, ResourceApplied):
                old = self.providers.get(key.name)
                self.providers[key.name] = ProviderConfig(
                    event.generation, event.spec, event.labels, event.annotations, event.uid, old.reported if old else None
                )
            elif envelope.facet == SPEC and isinstance(event, ResourceDeleted):
                self.providers.pop(key.name, None)
            elif envelope.facet == SELF and isinstance(event, Decision) and key.name in self.providers:
                self.providers[key.name].reported = event
            return
        deployment = self.deployments.get(key)
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                deployment = deployment or Deployment(key)
                deployment.generation, deployment.uid = event.generation, event.uid
                md = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
                assert isinstance(md, ModelDeployment)
                deployment.md = md
                deployment.paused = event.annotations.get(PAUSED) == "true"
                self.deployments[key] = deployment
            elif isinstance(event, DeletionRequested) and deployment is not None:
                deployment.deleting = True
            elif isinstance(event, ResourceDeleted) and deployment is not None:
                deployment.md = None
                if deployment.rendered is None:
                    self.deployments.pop(key, None)  # nothing of it out there: forget it
        elif deployment is not None:
            if envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
                deployment.observed[(event.object_kind, event.object_name)] = event
            elif envelope.facet == SELECTOR and isinstance(event, ProviderSelected | SelectionFailed):
                deployment.selection = event
            elif envelope.facet == STORAGE and isinstance(event, StoragePlanned | StorageInvalid):
                deployment.storage = event
            elif envelope.facet == SELF and isinstance(event, Decision):
                deployment.last = event
                if isinstance(event, WorkloadRendered | RenderFailed) and event.image is not None:
                    deployment.image = event.image
                if isinstance(event, WorkloadRendered):
                    deployment.rendered = event
                elif isinstance(event, WorkloadWithdrawn):
                    deployment.rendered = None
                    if deployment.md is None:
                        self.deployments.pop(key, None)  # deleted and cleaned up: forget it
