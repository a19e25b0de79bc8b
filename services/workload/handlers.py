"""The workload service: renders (and, in a cluster, writes) each deployment's objects; registers the built-in providers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from contracts.admission import admit
from contracts.cluster import DISCOVERY, ApisDiscovered, WorkloadObserved, deleted_by_hand
from contracts.conditions import same_decision
from contracts.events import Decision, Envelope, StatusReported, StatusSlice
from contracts.pipeline import ProviderRegistered, WorkloadRendered
from contracts.subjects import OBSERVED, SCALER, SELECTOR, SPEC, STORAGE, WATCHER, Key, kind_filter
from runtime.kubewriter import NotServed, ResourceConflict
from runtime.service import Effects, Runner, Service
from runtime.writer import RecordedWriter, Writer
from services.workload import decide, observe
from services.workload.projection import SELF, Deployment, WorkloadState
from services.workload.providers import BUILTIN, VERSION, builtin_configs
from services.workload.registry import ImageResolver

log = logging.getLogger("jetway.workload")
PROVIDER_KIND = "InferenceProviderConfig"
PROVIDER_CRDS = {
    "dynamo": ("nvidia.com/v1alpha1", "dynamographdeployments"),
    "kuberay": ("ray.io/v1", "rayservices"),
    "kaito": ("kaito.sh/v1beta1", "workspaces"),
}


class WorkloadService(Service):
    name = SELF
    consumes = (
        kind_filter("ModelDeployment"),
        kind_filter("ModelDeployment", SELECTOR),
        kind_filter("ModelDeployment", STORAGE),
        kind_filter("ModelDeployment", OBSERVED),
        kind_filter("ModelDeployment", SCALER),  # an autoscaled deployment's count
        kind_filter(PROVIDER_KIND),
        DISCOVERY.subject(WATCHER),
    )

    def __init__(
        self,
        writer: Writer | None = None,
        *,
        gateway_available: Callable[[], bool] | None = None,
        resync_interval: float | None = None,
        settings: Mapping[str, str] | None = None,
        resolver: ImageResolver | None = None,
    ) -> None:
        self.state = WorkloadState()
        self.writer: Writer = writer or RecordedWriter()
        self._gateway_available = gateway_available
        self.resync_interval = resync_interval  # level-triggered: objects deleted by hand come back
        self.settings = dict(settings or {})  # provider settings (render.settings), from the process's environment
        self.resolver = resolver  # Direct vLLM image tags → digests (services/workload/registry.py); None: resolution off
        self.configs = {c["metadata"]["name"]: c for c in builtin_configs()}

    def gateway_available(self) -> bool:
        if self._gateway_available is not None:
            return self._gateway_available()
        found = self.state.discovered
        return found is not None and found.serves_inference_gateway()

    def provider_ready(self, name: str) -> bool:
        """Standalone, every built-in provider is ready (it only renders); in a cluster, when its CRDs are served."""
        found = self.state.discovered
        if found is None or name not in PROVIDER_CRDS:
            return True
        return found.serves(*PROVIDER_CRDS[name])

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    async def alongside(self, runner: Runner) -> None:
        await self.writer.run()  # in a cluster, the cache a resync compares with

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        key = envelope.key
        if isinstance(envelope.event, ApisDiscovered):
            return [*(Key(PROVIDER_KIND, "", name) for name in BUILTIN), *self.state.deployments]  # gateway APIs may have come or gone
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
        wanted = decide.image_lookup(deployment) if self.resolver is not None else None
        image = await self.resolver.resolve(wanted) if self.resolver is not None and wanted else None
        steps = decide.decide(
            deployment,
            BUILTIN,
            gateway_available=self.gateway_available(),
            cluster=self.writer.cluster,
            settings=self.settings,
            image=image,
        )
        for step in steps:
            if step.remove:
                await self.writer.delete(step.remove, manager=self.name)
            record: Decision = step.record
            if step.write and self._must_write(deployment, record, effects):
                provider = getattr(step.record, "provider", "")
                gone = deleted_by_hand(deployment.observed, step.write)
                try:
                    await self.writer.apply(key, step.write, manager=self.name, deleted=gone)
                except ResourceConflict as exc:
                    record = decide.blocked(deployment, provider, "ResourceConflict", str(exc))
                except NotServed as exc:
                    record = decide.blocked(deployment, provider, "CreateFailed", str(exc))
            if not same_decision(record, _comparable(deployment, record)):
                await effects.emit(key, record)
        await self._observe(key, deployment, effects)

    @staticmethod
    def _must_write(deployment: Deployment, record: Decision, effects: Effects) -> bool:
        """Edge-triggered writes only when something changed; a level pass (start-up, resync) re-asserts all."""
        if (
            effects.level
            or not same_decision(record, deployment.rendered)
            or not isinstance(deployment.last, WorkloadRendered | WorkloadObserved)
        ):
            return True
        return deleted_by_hand(deployment.observed, deployment.rendered.objects if deployment.rendered else ())

    async def _observe(self, key: Key, deployment: Deployment, effects: Effects) -> None:
        """In a cluster: the workload's phase, replicas and Ready from what the cluster reports."""
        if not self.writer.cluster or deployment.rendered is None or deployment.deleting or deployment.applied is None:
            return
        if deployment.rendered.generation != deployment.generation:
            return  # the current generation is not rendered yet: its status is the render's to set first
        if not isinstance(deployment.last, WorkloadRendered | WorkloadObserved):
            return
        observed = observe.observed_status(deployment.rendered, deployment.observed, deployment.generation)
        if observed is not None and not same_decision(observed, deployment.last):
            await effects.emit(key, observed)

    async def _register(self, key: Key, effects: Effects) -> None:
        """Self-registration of a built-in provider, then its readiness report.

        In a cluster the config is created there (once the watcher has listed what exists, so an edited one
        is left alone) and comes back as an event. Standalone, the watcher is the one writer of specs: this
        service asks it (`ProviderRegistered`), and it records the config unless a user applied one (a
        registered one that differs from ours is ours upgraded, and is asked for again)."""
        manifest = self.configs[key.name]
        verdict = admit(manifest)
        assert verdict.obj is not None, verdict.problems
        wire = verdict.obj.wire()
        stored = self.state.providers.get(key.name)
        if self.writer.cluster:
            if stored is None and self.state.discovered is not None:
                try:
                    await self.writer.apply(key, [wire], manager=self.name)
                except NotServed as exc:
                    log.warning("cannot register provider %s: %s", key.name, exc)
                return
        else:
            ours = stored is None or stored.registered
            differs = stored is None or (stored.spec, stored.labels, stored.annotations) != (
                wire["spec"],
                wire["metadata"].get("labels", {}),
                wire["metadata"].get("annotations", {}),
            )
            if ours and differs:  # asked again whenever it is missing or ours and not this release's
                await effects.emit(key, ProviderRegistered(manifest=wire))
        if stored is None:
            return
        report = StatusReported(
            generation=stored.generation, status=StatusSlice(fields={"ready": self.provider_ready(key.name), "version": VERSION})
        )
        if not same_decision(report, stored.reported):
            await effects.emit(key, report)


def _comparable(deployment: Deployment, record: Decision) -> Decision | None:
    """What a new decision repeats, if anything: a render is compared with the last render (an
    observation of the cluster may have been recorded since), anything else with the last decision."""
    if isinstance(record, WorkloadRendered) and isinstance(deployment.last, WorkloadObserved):
        return deployment.rendered
    return deployment.last
