"""The storage service: a storage plan per deployment generation; PVCs and the download Job written in a cluster."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from contracts.admission import stored
from contracts.conditions import carried, same_decision
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted
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


@dataclass
class StorageState:
    deployments: dict[Key, Deployment] = field(default_factory=dict)
    observed: dict[Key, Observed] = field(default_factory=dict)  # what the cluster reports (Kubernetes mode)


class StorageService(Service):
    name = SELF
    consumes = (kind_filter("ModelDeployment"),)

    def __init__(self, writer: Writer | None = None) -> None:
        self.state = StorageState()
        self.writer: Writer = writer or RecordedWriter()

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                md = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
                assert isinstance(md, ModelDeployment)
                old = self.state.deployments.get(key)
                self.state.deployments[key] = Deployment(
                    md, event.generation, event.uid, event.annotations.get(PAUSED) == "true", old.last if old else None
                )
            elif isinstance(event, ResourceDeleted):
                self.state.deployments.pop(key, None)
                self.state.observed.pop(key, None)
        elif envelope.facet == SELF and isinstance(event, Decision) and key in self.state.deployments:
            self.state.deployments[key].last = event

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        return (envelope.key,) if envelope.facet == SPEC else ()

    def keys(self) -> Iterable[Key]:
        return list(self.state.deployments)

    async def reconcile(self, key: Key, effects: Effects) -> None:
        deployment = self.state.deployments.get(key)
        if deployment is None or deployment.paused:
            return
        decision = carried(plan(deployment.md, key, deployment.generation, deployment.uid, self.state.observed.get(key)), deployment.last)
        if isinstance(decision, StoragePlanned) and decision.objects:
            await self.writer.apply(key, list(decision.objects), manager=self.name)
        if not same_decision(decision, deployment.last):
            await effects.emit(key, decision)
