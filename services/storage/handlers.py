"""The storage service: a storage plan per deployment generation; PVCs and the download Job written in a cluster."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.cluster import OBSERVED
from contracts.conditions import carried, same_decision
from contracts.events import Decision, Envelope
from contracts.pipeline import StoragePlanned
from contracts.subjects import SPEC, Key, kind_filter
from runtime.desired import withdraw
from runtime.kubewriter import ResourceConflict
from runtime.service import Effects, Runner, Service
from runtime.writer import RecordedWriter, Writer
from services.storage.decide import conflicted, plan
from services.storage.projection import SELF, StorageState


class StorageService(Service):
    name = SELF
    consumes = (kind_filter("ModelDeployment"), kind_filter("ModelDeployment", OBSERVED))

    def __init__(self, writer: Writer | None = None, *, resync_interval: float | None = None) -> None:
        self.state = StorageState()
        self.writer: Writer = writer or RecordedWriter()
        self.resync_interval = resync_interval  # level-triggered: a PVC deleted by hand comes back

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    async def alongside(self, runner: Runner) -> None:
        await self.writer.run()  # in a cluster, the cache a resync compares with

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        return (envelope.key,) if envelope.facet in (SPEC, OBSERVED) else ()

    def keys(self) -> Iterable[Key]:
        return list(self.state.deployments)

    async def reconcile(self, key: Key, effects: Effects) -> None:
        deployment = self.state.deployments.get(key)
        if deployment is None:
            return
        if deployment.applied is None or deployment.deleting:  # its PVCs and Job go, then the storage slice is cleared
            await withdraw(deployment, self.writer, effects, manager=self.name)
            return
        if deployment.paused:
            return
        observed = deployment.observed(watched=self.writer.cluster)  # in a cluster the watcher reports pre-existing claims
        decision: Decision = carried(plan(deployment.applied, key, deployment.generation, deployment.uid, observed), deployment.last)
        changed = bool(deployment.gone) or not same_decision(decision, deployment.last)
        if isinstance(decision, StoragePlanned) and decision.objects and (effects.level or changed):
            try:
                await self.writer.apply(key, list(decision.objects), manager=self.name, deleted=bool(deployment.gone))
            except ResourceConflict as exc:
                # a name the plan needs is taken by an object that is not this deployment's: the writer wrote
                # none of the plan; the deployment fails saying so, and the next pass (a resync) tries again
                decision = carried(conflicted(deployment.generation, exc.kind, exc.name, exc.namespace, exc.held), deployment.last)
        if not same_decision(decision, deployment.last):
            await effects.emit(key, decision)
