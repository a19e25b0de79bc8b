"""What the storage service knows: each deployment, its last plan, and what the cluster reports of its PVCs and Job."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.admission import stored
from contracts.cluster import OBSERVED, DeletionRequested, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted
from contracts.modeldeployment import ModelDeployment
from contracts.objects import PAUSED
from contracts.subjects import SPEC, Key
from services.storage.decide import Observed

SELF = "storage"


@dataclass
class Deployment:
    md: ModelDeployment
    generation: int
    uid: str
    paused: bool
    last: Decision | None = None
    deleting: bool = False
    pvc_phases: dict[str, str] = field(default_factory=dict)  # what the cluster reports (Kubernetes mode)
    job: str = ""
    gone: set[str] = field(default_factory=set)  # claims reported deleted (by hand): written again

    def observed(self) -> Observed:
        return Observed(dict(self.pvc_phases), self.job)


def _job_state(event: ObjectObserved) -> str:
    if not event.exists:
        return ""
    conditions = {c.get("type"): c.get("status") for c in event.summary.get("conditions", [])}
    if conditions.get("Complete") == "True" or event.summary.get("succeeded", 0) > 0:
        return "Complete"
    if conditions.get("Failed") == "True":
        return "Failed"
    return "Running"


@dataclass
class StorageState:
    deployments: dict[Key, Deployment] = field(default_factory=dict)

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        deployment = self.deployments.get(key)
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                md = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
                assert isinstance(md, ModelDeployment)
                fresh = Deployment(md, event.generation, event.uid, event.annotations.get(PAUSED) == "true")
                if deployment is not None:
                    fresh.last, fresh.deleting, fresh.pvc_phases, fresh.job = (
                        deployment.last,
                        deployment.deleting,
                        deployment.pvc_phases,
                        deployment.job,
                    )
                self.deployments[key] = fresh
            elif isinstance(event, DeletionRequested) and deployment is not None:
                deployment.deleting = True
            elif isinstance(event, ResourceDeleted):
                self.deployments.pop(key, None)
        elif deployment is None:
            return
        elif envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            if event.object_kind == "PersistentVolumeClaim":
                if event.exists:
                    deployment.pvc_phases[event.object_name] = str(event.summary.get("phase", "Pending"))
                    deployment.gone.discard(event.object_name)
                else:
                    deployment.pvc_phases.pop(event.object_name, None)
                    deployment.gone.add(event.object_name)
            elif event.object_kind == "Job":
                deployment.job = _job_state(event)
        elif envelope.facet == SELF and isinstance(event, Decision):
            deployment.last = event
