"""The workload service: renders (and, in a cluster, writes) each deployment's objects; registers the built-in providers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from contracts.admission import admit
from contracts.conditions import same_decision
from contracts.events import Envelope, ResourceApplied, StatusReported, StatusSlice
from contracts.subjects import SPEC, Key, kind_filter
from runtime.service import Effects, Service
from runtime.writer import RecordedWriter, Writer
from services.workload import decide
from services.workload.projection import SELF, WorkloadState
from services.workload.providers import BUILTIN, VERSION, builtin_configs

PROVIDER_KIND = "InferenceProviderConfig"


class WorkloadService(Service):
    name = SELF
    consumes = (
        kind_filter("ModelDeployment"),
        kind_filter("ModelDeployment", "selector"),
        kind_filter("ModelDeployment", "storage"),
        kind_filter(PROVIDER_KIND),
    )

    def __init__(
        self,
        writer: Writer | None = None,
        *,
        gateway_available: Callable[[], bool] = lambda: False,
        provider_ready: Callable[[str], bool] = lambda name: True,
    ) -> None:
        self.state = WorkloadState()
        self.writer: Writer = writer or RecordedWriter()
        self.gateway_available = gateway_available
        self.provider_ready = provider_ready
        self.registered_by: dict[str, str] = {}  # provider → who wrote its current spec
        self.configs = {c["metadata"]["name"]: c for c in builtin_configs()}

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)
        if envelope.key.kind == PROVIDER_KIND and envelope.facet == SPEC:
            self.registered_by[envelope.key.name] = envelope.producer

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        key = envelope.key
        if key.kind == PROVIDER_KIND:
            return (key,) if key.name in BUILTIN and envelope.facet == SPEC else ()
        return (key,) if envelope.facet != SELF else ()

    def keys(self) -> Iterable[Key]:
        return [*self.state.deployments, *(Key(PROVIDER_KIND, "", name) for name in BUILTIN)]

    async def reconcile(self, key: Key, effects: Effects) -> None:
        if key.kind == PROVIDER_KIND:
            await self._register(key, effects)
            return
        deployment = self.state.deployments.get(key)
        if deployment is None:
            return
        for step in decide.decide(deployment, BUILTIN, gateway_available=self.gateway_available(), cluster=self.writer.cluster):
            if step.remove:
                await self.writer.delete(step.remove, manager=self.name)
            if step.write:
                await self.writer.apply(key, step.write, manager=self.name)
            if not same_decision(step.record, deployment.last):
                await effects.emit(key, step.record)

    async def _register(self, key: Key, effects: Effects) -> None:
        """Self-registration: our config is (re)written unless someone else has edited it since."""
        manifest = self.configs[key.name]
        verdict = admit(manifest)
        assert verdict.obj is not None, verdict.problems
        wire = verdict.obj.wire()
        stored = self.state.providers.get(key.name)
        ours = stored is None or self.registered_by.get(key.name) == self.name
        differs = stored is None or (stored.spec, stored.labels, stored.annotations) != (
            wire["spec"],
            wire["metadata"].get("labels", {}),
            wire["metadata"].get("annotations", {}),
        )
        if ours and differs:
            event = ResourceApplied(
                kind=PROVIDER_KIND,
                namespace="",
                name=key.name,
                generation=(stored.generation + 1) if stored else 1,
                spec=wire["spec"],
                labels=wire["metadata"].get("labels", {}),
                annotations=wire["metadata"].get("annotations", {}),
                uid=stored.uid if stored else str(uuid.uuid4()),
            )
            await effects.emit(key, event, facet=SPEC)
            stored = self.state.providers.get(key.name)
        if stored is None:
            return
        ready = self.provider_ready(key.name)
        report = StatusReported(generation=stored.generation, status=StatusSlice(fields={"ready": ready, "version": VERSION}))
        if not same_decision(report, stored.reported):
            await effects.emit(key, report)
