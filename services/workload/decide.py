"""What the workload service does about one deployment, pure: render, switch, withdraw, or wait."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts import scaling
from contracts.events import Decision, StatusCondition, StatusReported, StatusSlice
from contracts.objects import ref
from contracts.pipeline import ImageResolution, ProviderSelected, RenderFailed, StoragePlanned, WorkloadRendered, WorkloadWithdrawn
from services.workload import images
from services.workload import render as renderers
from services.workload.projection import Deployment
from services.workload.render.common import Inputs, RenderError

STANDALONE_NOTE = "standalone: recorded as events, no cluster to run them"


@dataclass(frozen=True)
class Intent:
    """One step: remove these objects, write those, then record the decision."""

    record: Decision
    write: list[dict[str, Any]] = field(default_factory=list)
    remove: list[dict[str, Any]] = field(default_factory=list)


def _names(objects: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> str:
    return ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["apiVersion"], obj["kind"], obj["metadata"]["name"]


def rendered(
    d: Deployment, provider: str, objects: list[dict[str, Any]], inputs: Inputs, *, cluster: bool, prepared: Prepared | None = None
) -> WorkloadRendered:
    generation = d.generation
    prepared = prepared or Prepared(inputs)
    created = StatusCondition(
        type="ResourceCreated",
        status="True",
        reason="ResourceCreated",
        observedGeneration=generation,
        message=f"{'created' if cluster else 'rendered'} {_names(objects)}" + ("" if cluster else f" ({STANDALONE_NOTE})"),
    )
    if cluster:
        ready = StatusCondition(
            type="Ready",
            status="False",
            reason="DeploymentInProgress",
            observedGeneration=generation,
            message="waiting for the workload to become ready",
        )
        phase, message = "Deploying", f"{renderers.PROVIDERS[provider].__name__.rsplit('.', 1)[-1]} resources created, waiting for pods"
    else:
        ready = StatusCondition(
            type="Ready",
            status="False",
            reason="NoCluster",
            observedGeneration=generation,
            message="no cluster attached: the objects are recorded, nothing runs them",
        )
        phase, message = "Pending", f"rendered {len(objects)} object(s); standalone mode runs no pods"
    primary = objects[0]
    fields = {
        "provider": {"resourceName": primary["metadata"]["name"], "resourceKind": primary["kind"]},
        "replicas": {"desired": renderers.replicas(provider, inputs), "ready": 0, "available": 0},
        "endpoint": renderers.endpoint(provider, inputs),
        **prepared.fields,
    }
    return WorkloadRendered(
        generation=generation,
        provider=provider,
        objects=tuple(objects),
        status=StatusSlice(conditions=(*prepared.conditions, created, ready), phase=phase, message=message, fields=fields),
        image=prepared.image,
    )


def blocked(d: Deployment, provider: str, reason: str, message: str) -> RenderFailed:
    """The objects could not be written: another owner holds the name, or the cluster lacks the kind."""
    conditions = (
        StatusCondition(type="ResourceCreated", status="False", reason=reason, message=message, observedGeneration=d.generation),
        StatusCondition(type="Ready", status="False", reason=reason, message=message, observedGeneration=d.generation),
    )
    return RenderFailed(
        generation=d.generation,
        provider=provider,
        message=message,
        status=StatusSlice(conditions=conditions, phase="Failed", message=message),
    )


def withdrawn(d: Deployment, provider: str, objects: tuple[dict[str, Any], ...]) -> WorkloadWithdrawn:
    return WorkloadWithdrawn(generation=d.generation, provider=provider, objects=tuple(ref(o) for o in objects))


def decide(
    d: Deployment,
    builtin: tuple[str, ...],
    *,
    gateway_available: bool = False,
    cluster: bool = False,
    settings: Mapping[str, str] | None = None,
    image: ImageResolution | None = None,
) -> list[Intent]:
    """The steps that bring this deployment's objects to what its selection and storage say (`settings`: the
    provider settings the process was started with, `render.settings`; `image`: the registry's answer
    for `image_lookup(d)`, when there was a question)."""
    previous = d.rendered
    if d.applied is None or d.deleting:  # deleted (or being deleted): take its objects away
        return [Intent(withdrawn(d, previous.provider, previous.objects), remove=list(previous.objects))] if previous else []
    if d.paused:
        return []
    selection, storage = d.selection, d.storage
    if not isinstance(selection, ProviderSelected) or selection.generation != d.generation:
        return []  # the selector has not chosen for this generation (or could not): wait for it
    if not isinstance(storage, StoragePlanned) or storage.generation != d.generation:
        return []  # no storage plan for this generation yet, or an invalid one (the storage service says why)
    provider = selection.provider
    steps: list[Intent] = []
    if previous is not None and previous.provider != provider:
        # Switching providers: the old provider's objects go first, then the new ones are rendered.
        steps.append(Intent(withdrawn(d, previous.provider, previous.objects), remove=list(previous.objects)))
        previous = None
    if provider not in builtin:
        condition = StatusCondition(
            type="ResourceCreated",
            status="Unknown",
            reason="ExternalProvider",
            observedGeneration=d.generation,
            message=f"provider {provider} renders this deployment with its own controller; Jetway does not",
        )
        return [*steps, Intent(StatusReported(generation=d.generation, status=StatusSlice(conditions=(condition,))))]
    count = scaled(d, provider)
    inputs = Inputs(d.key, d.uid, d.applied, selection.engine, storage, gateway_available, settings or {}, scaled=count)
    prepared = prepare(d, provider, inputs, image)
    if isinstance(prepared, RenderFailed):
        return [*steps, Intent(prepared)]
    inputs = prepared.inputs
    try:
        objects = renderers.render(provider, inputs)
    except RenderError as exc:
        message = f"Failed to generate {provider} resources: {exc}"
        condition = StatusCondition(
            type="ResourceCreated", status="False", reason="TransformFailed", message=message, observedGeneration=d.generation
        )
        return [
            *steps,
            Intent(
                RenderFailed(
                    generation=d.generation,
                    provider=provider,
                    message=str(exc),
                    status=StatusSlice(
                        conditions=(*prepared.conditions, condition), phase="Failed", message=message, fields=prepared.fields
                    ),
                    image=prepared.image,
                )
            ),
        ]
    stale = []
    if previous is not None:
        wanted = {_key(o) for o in objects}
        stale = [o for o in previous.objects if _key(o) not in wanted]
    return [*steps, Intent(rendered(d, provider, objects, inputs, cluster=cluster, prepared=prepared), write=objects, remove=stale)]


def scaled(d: Deployment, provider: str) -> int | None:
    """The count an autoscaled deployment is rendered with: the scaler's (applied) decision within the spec's range,
    else its starting count; None when it is not autoscaled, or on a provider whose objects cannot take a changed
    count (KAITO, KubeRay: they render `spec.scaling.replicas` as they always did)."""
    if d.applied is None:
        return None
    can = scaling.provider_scaling(provider)
    if can is None or not can.scales:
        return None
    return scaling.current_replicas(d.applied, d.scale, floor=0 if can.to_zero else 1)


@dataclass(frozen=True)
class Prepared:
    """What is settled before a provider renders: its compatibility (`ProviderCompatible`) and, for
    Direct vLLM, the image (`status.image`, the image conditions, the resolution to record)."""

    inputs: Inputs
    conditions: tuple[StatusCondition, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    image: ImageResolution | None = None


RESOLVES_IMAGES = "vllm"  # the provider whose image tags are resolved to digests (AI Runway's Direct vLLM)


def prepare(d: Deployment, provider: str, inputs: Inputs, looked_up: ImageResolution | None) -> Prepared | RenderFailed:
    """A provider with a `compatibility` check refuses what it cannot run (`ProviderCompatible=False`, phase
    Failed); then Direct vLLM's image is decided (`services/workload/images.py`), and a default image no
    registry could resolve renders nothing."""
    module = renderers.PROVIDERS.get(provider)
    check = getattr(module, "compatibility", None)
    if module is None or check is None or d.applied is None:
        return Prepared(inputs)
    generation = d.generation
    problem = check(inputs)
    if problem:
        refused = StatusCondition(
            type="ProviderCompatible", status="False", reason="IncompatibleConfiguration", message=problem, observedGeneration=generation
        )
        return RenderFailed(
            generation=generation,
            provider=provider,
            message=problem,
            status=StatusSlice(conditions=(refused,), phase="Failed", message=problem),
        )
    compatible = StatusCondition(
        type="ProviderCompatible", status="True", reason="CompatibilityVerified", message=module.COMPATIBLE, observedGeneration=generation
    )
    if provider != RESOLVES_IMAGES:
        return Prepared(inputs, (compatible,))
    default = module.DEFAULT_IMAGE
    decision = images.decide(
        images.plan(d.applied, default),
        d.image,
        looked_up,
        generation=generation,
        annotations=d.applied.metadata.annotations or {},
        default_image=default,
    )
    conditions, fields = (compatible, *decision.conditions), {"image": decision.status}
    if decision.failure:
        return RenderFailed(
            generation=generation,
            provider=provider,
            message=decision.failure,
            status=StatusSlice(conditions=conditions, phase="Failed", message=decision.failure, fields=fields),
            image=decision.fact,
        )
    return Prepared(dataclasses.replace(inputs, default_image=decision.default_image), conditions, fields, decision.fact)


def image_lookup(d: Deployment) -> str | None:
    """The image reference a registry must be asked about before `decide` renders this deployment: Direct
    vLLM's image by tag, when the last resolution does not answer it (None: nothing to ask)."""
    selection, storage, md = d.selection, d.storage, d.applied
    if md is None or d.deleting or d.paused or not isinstance(selection, ProviderSelected) or selection.provider != RESOLVES_IMAGES:
        return None
    if selection.generation != d.generation or not isinstance(storage, StoragePlanned) or storage.generation != d.generation:
        return None
    module = renderers.PROVIDERS[RESOLVES_IMAGES]
    if module.compatibility(Inputs(d.key, d.uid, md, selection.engine, storage)):
        return None
    wanted = images.plan(md, module.DEFAULT_IMAGE)
    return wanted.requested if images.needs_lookup(wanted, d.image) else None
