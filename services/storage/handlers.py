"""The storage service: a storage plan per deployment generation; PVCs and the download Job written in a cluster."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from contracts.admission import stored
from contracts.cluster import OBSERVED, DeletionRequested, ObjectObserved
from contracts.conditions import carried, same_decision
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted, Withdrawn
from contracts.modeldeployment import ModelDeployment
from contracts.objects import PAUSED
from contracts.pipeline import StoragePlanned
from contracts.subjects import SPEC, Key, kind_filter
from runtime.service import Effects, Service
from runtime.writer import RecordedWriter, Writer
from services.storage.decide import Observed, plan

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


class StorageService(Service):
    name = SELF
    consumes = (kind_filter("ModelDeployment"), kind_filter("ModelDeployment", OBSERVED))

    def __init__(self, writer: Writer | None = None, *, resync_interval: float | None = None) -> None:
        self.state = StorageState()
        self.writer: Writer = writer or RecordedWriter()
        self.resync_interval = resync_interval  # level-triggered: a PVC deleted by hand comes back

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        return (envelope.key,) if envelope.facet in (SPEC, OBSERVED) else ()

    def keys(self) -> Iterable[Key]:
        return list(self.state.deployments)

    async def reconcile(self, key: Key, effects: Effects) -> None:
        deployment = self.state.deployments.get(key)
        if deployment is None:
            return
        if deployment.deleting:
            await self._withdraw(key, deployment, effects)
            return
        if deployment.paused:
            return
        decision = carried(plan(deployment.md, key, deployment.generation, deployment.uid, deployment.observed()), deployment.last)
        if (
            isinstance(decision, StoragePlanned)
            and decision.objects
            and (effects.level or deployment.gone or not same_decision(decision, deployment.last))
        ):
            await self.writer.apply(key, list(decision.objects), manager=self.name)
        if not same_decision(decision, deployment.last):
            await effects.emit(key, decision)

    async def _withdraw(self, key: Key, deployment: Deployment, effects: Effects) -> None:
        """The deployment is being deleted: its PVCs and Job go, then the storage slice is cleared."""
        if isinstance(deployment.last, Withdrawn):
            return
        if isinstance(deployment.last, StoragePlanned) and deployment.last.objects:
            await self.writer.delete(list(reversed(deployment.last.objects)), manager=self.name)
        await effects.emit(key, Withdrawn(generation=deployment.generation))
