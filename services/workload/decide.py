"""What the workload service does about one deployment, pure: render, switch, withdraw, or wait."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.events import Decision, StatusCondition, StatusReported, StatusSlice
from contracts.objects import ref
from contracts.pipeline import ProviderSelected, RenderFailed, StoragePlanned, WorkloadRendered, WorkloadWithdrawn
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


def rendered(d: Deployment, provider: str, objects: list[dict[str, Any]], inputs: Inputs, *, cluster: bool) -> WorkloadRendered:
    generation = d.generation
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
    }
    return WorkloadRendered(
        generation=generation,
        provider=provider,
        objects=tuple(objects),
        status=StatusSlice(conditions=(created, ready), phase=phase, message=message, fields=fields),
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
) -> list[Intent]:
    """The steps that bring this deployment's objects to what its selection and storage say (`settings`: the
    provider settings the process was started with, `render.settings`)."""
    previous = d.rendered
    if d.md is None or d.deleting:  # deleted (or being deleted): take its objects away
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
    inputs = Inputs(d.key, d.uid, d.md, selection.engine, storage, gateway_available, settings or {})
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
                    status=StatusSlice(conditions=(condition,), phase="Failed", message=message),
                )
            ),
        ]
    stale = []
    if previous is not None:
        wanted = {_key(o) for o in objects}
        stale = [o for o in previous.objects if _key(o) not in wanted]
    return [*steps, Intent(rendered(d, provider, objects, inputs, cluster=cluster), write=objects, remove=stale)]
