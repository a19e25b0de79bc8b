"""The binding service's decisions, purely: is a framework ready, and what does an agent bind to.

- AgentProviderConfig: container backends are ready; an operator-backed one needs its
  `operatorAPIGroup` (a group, or group/version) served by the cluster. The
  `airunway.ai/install-instructions` annotation is appended to the not-ready messages.
- AgentDeployment: `FrameworkReady` (the framework is known and ready, instructions appended
  for any not-ready reason), then `ModelBound` by the one binding mode it sets, in the spec's
  order for `deploymentRef` (the Gateway in `status.gateway` and its sole compatible ready
  listener; several ready listeners keep the published endpoint; otherwise the model Service),
  then the framework's workload (`render.py`) and `Ready` from what the cluster reports of it:
  `agent_reconciled`, the agent's whole decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts.agents import ANNOTATION_INSTALL_INSTRUCTIONS, AgentDeployment, AgentProviderConfig
from contracts.binding import AgentReconciled, FrameworkAssessed
from contracts.cluster import ApisDiscovered, ObjectObserved
from contracts.events import StatusCondition, StatusSlice
from contracts.gatewayapi import GatewayView, Unresolved, listener_url, normalize_endpoint, ready_listeners, select_listener
from contracts.modeldeployment import ModelDeployment
from contracts.objects import ref
from contracts.rules.urls import base_url_problem
from services.binding import render

# Binding failures the user must fix (the agent is Failed); the others resolve by waiting (Pending).
PERMANENT = {
    "UnsupportedBindingMode",
    "CrossNamespaceRefNotAllowed",
    "InvalidExternalAPI",
    "WildcardListenerHostname",
    "ListenerNameRequired",
    "ListenerNotFound",
    "ListenerNotCompatible",
    "NoCompatibleListener",
}


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str
    message: str


def with_instructions(message: str, annotations: dict[str, str]) -> str:
    extra = (annotations.get(ANNOTATION_INSTALL_INSTRUCTIONS) or "").strip()
    return f"{message}. {extra}" if extra else message


def served(discovered: ApisDiscovered | None, group: str) -> bool:
    """Whether the cluster serves an API group ("kagent.dev") or group/version ("kagent.dev/v1alpha2")."""
    if discovered is None:
        return False
    prefix = group.rstrip("/") + "/"
    return any(r.startswith(prefix) for r in discovered.resources) if "/" in group else discovered.serves_group(group)


def framework_readiness(config: AgentProviderConfig, discovered: ApisDiscovered | None) -> Readiness:
    caps = config.spec.capabilities
    annotations = config.metadata.annotations or {}
    if caps.backend == "container":
        return Readiness(True, "ContainerBackend", "container backend: Jetway runs the agent's container itself")
    if not caps.requiresOperator:
        return Readiness(True, "NoOperatorRequired", "no operator required")
    group = caps.operatorAPIGroup
    if not group:
        return Readiness(
            False,
            "OperatorAPIGroupMissing",
            with_instructions("spec.capabilities.requiresOperator is true but spec.capabilities.operatorAPIGroup is not set", annotations),
        )
    if not served(discovered, group):
        return Readiness(
            False, "OperatorNotInstalled", with_instructions(f"the operator API group {group} is not served by the cluster", annotations)
        )
    return Readiness(True, "OperatorInstalled", f"the operator API group {group} is served")


def framework_assessed(config: AgentProviderConfig, generation: int, discovered: ApisDiscovered | None) -> FrameworkAssessed:
    """An AgentProviderConfig's decision: `Ready` and `status.ready` from its readiness."""
    readiness = framework_readiness(config, discovered)
    condition = StatusCondition.of("Ready", readiness.ready, readiness.reason, readiness.message, generation)
    return FrameworkAssessed(
        generation=generation,
        ready=readiness.ready,
        reason=readiness.reason,
        status=StatusSlice(conditions=(condition,), fields={"ready": readiness.ready}),
    )


# --- binding ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelView:
    """A ModelDeployment as the binding sees it: its spec and the status Jetway composed for it."""

    md: ModelDeployment
    uid: str
    gateway: dict[str, Any]  # status.gateway ({} when none)
    endpoint: dict[str, Any] | None  # status.endpoint


@dataclass(frozen=True)
class Bound:
    binding: dict[str, Any]  # status.modelBinding
    message: str


@dataclass(frozen=True)
class NotBound:
    reason: str
    message: str


def served_model_name(view: ModelView) -> str:
    """`status.gateway.modelName`, then `spec.model.servedName`, then `spec.model.id`."""
    return str(view.gateway.get("modelName") or view.md.spec.model.servedName or view.md.spec.model.id or view.md.metadata.name)


def _service_url(view: ModelView, namespace: str) -> str | None:
    if not view.endpoint or not view.endpoint.get("service"):
        return None
    return f"http://{view.endpoint['service']}.{namespace}.svc.cluster.local:{view.endpoint.get('port') or 80}/v1"


def bind_deployment_ref(agent: AgentDeployment, view: ModelView | None, gateways: dict[str, GatewayView]) -> Bound | NotBound:
    ref = agent.spec.model.deploymentRef
    assert ref is not None
    namespace = agent.metadata.namespace or "default"
    target = ref.namespace or namespace
    if target != namespace:
        return NotBound(
            "CrossNamespaceRefNotAllowed",
            f"deploymentRef {target}/{ref.name} is in another namespace; an agent binds to ModelDeployments in its own namespace",
        )
    if view is None:
        return NotBound("ModelDeploymentNotFound", f"ModelDeployment {target}/{ref.name} not found")
    name = served_model_name(view)
    binding = {"bindingMode": "deploymentRef", "apiType": "openai", "modelName": name, "observedResourceUID": view.uid}
    identity = (view.gateway.get("gatewayNamespace"), view.gateway.get("gatewayName"))
    if identity[0] and identity[1]:
        gateway = gateways.get(f"{identity[0]}/{identity[1]}")
        ready = ready_listeners(gateway) if gateway else []
        if gateway is not None and len(ready) == 1:
            url = listener_url(gateway, ready[0])
            if isinstance(url, str):
                return Bound({**binding, "baseURL": url}, f"bound through Gateway {gateway.ref} listener {ready[0]['name']}")
        elif len(ready) > 1 and view.gateway.get("endpoint"):
            return Bound(
                {**binding, "baseURL": normalize_endpoint(str(view.gateway["endpoint"]))},
                f"bound to the endpoint Gateway {identity[0]}/{identity[1]} published ({len(ready)} ready listeners)",
            )
    service = _service_url(view, target)
    if service is None:
        return NotBound("ModelDeploymentNotReady", f"ModelDeployment {target}/{ref.name} has no endpoint yet")
    return Bound({**binding, "baseURL": service}, f"bound to the model Service of {target}/{ref.name}")


def bind_gateway_endpoint(agent: AgentDeployment, gateways: dict[str, GatewayView]) -> Bound | NotBound:
    spec = agent.spec.model.gatewayEndpoint
    assert spec is not None
    namespace = spec.gatewayRef.namespace or agent.metadata.namespace or "default"
    gateway = gateways.get(f"{namespace}/{spec.gatewayRef.name}")
    if gateway is None:
        return NotBound("GatewayNotFound", f"Gateway {namespace}/{spec.gatewayRef.name} not found")
    listener = select_listener(gateway, spec.gatewayRef.listenerName)
    if isinstance(listener, Unresolved):
        return NotBound(listener.reason, listener.message)
    url = listener_url(gateway, listener)
    if isinstance(url, Unresolved):
        return NotBound(url.reason, url.message)
    binding = {"bindingMode": "gatewayEndpoint", "apiType": "openai", "baseURL": url, "modelName": spec.modelName}
    return Bound(binding, f"bound through Gateway {gateway.ref} listener {listener['name']}")


def bind_external(agent: AgentDeployment) -> Bound | NotBound:
    spec = agent.spec.model.externalAPI
    assert spec is not None
    why = base_url_problem(spec.baseURL)  # admission checks this too; an object admitted while the webhook was down is caught here
    if why is not None:
        return NotBound("InvalidExternalAPI", f"spec.model.externalAPI.baseURL: {why}")
    binding: dict[str, Any] = {"bindingMode": "externalAPI", "apiType": spec.type, "baseURL": spec.baseURL, "modelName": spec.modelName}
    if spec.credentialsRef is not None:
        binding["credentialsRef"] = {"name": spec.credentialsRef.name, "key": spec.credentialsRef.key}
    return Bound(binding, f"bound to the external {spec.type} API")


def bind(
    agent: AgentDeployment, config: AgentProviderConfig, models: dict[tuple[str, str], ModelView], gateways: dict[str, GatewayView]
) -> Bound | NotBound:
    modes = config.spec.capabilities.modelBindingModes
    mode = next(m for m in ("deploymentRef", "gatewayEndpoint", "externalAPI") if getattr(agent.spec.model, m) is not None)
    if modes and mode not in modes:
        return NotBound(
            "UnsupportedBindingMode",
            f"framework {config.metadata.name} does not support binding mode {mode} (it supports {', '.join(modes)})",
        )
    if mode == "deploymentRef":
        ref = agent.spec.model.deploymentRef
        assert ref is not None
        key = (ref.namespace or agent.metadata.namespace or "default", ref.name)
        return bind_deployment_ref(agent, models.get(key), gateways)
    if mode == "gatewayEndpoint":
        return bind_gateway_endpoint(agent, gateways)
    return bind_external(agent)


# --- the agent's decision -----------------------------------------------------------------


@dataclass(frozen=True)
class FrameworkView:
    """The framework an agent names, as the binding service knows it: its config and reported version."""

    config: AgentProviderConfig
    version: str = ""  # what the framework's own controller reports (status.version)


def agent_reconciled(
    agent: AgentDeployment,
    generation: int,
    uid: str,
    observed: Mapping[tuple[str, str], ObjectObserved],
    framework: FrameworkView | None,
    discovered: ApisDiscovered | None,
    models: dict[tuple[str, str], ModelView],
    gateways: dict[str, GatewayView],
) -> tuple[AgentReconciled, list[dict[str, Any]]]:
    """The agent's conditions, binding and workload objects (the status is what it will be once they are written)."""
    name = agent.spec.framework.name
    fields: dict[str, Any] = {
        "framework": {"name": name, **({"providerVersion": framework.version} if framework and framework.version else {})}
    }
    if framework is None:
        readiness = Readiness(False, "FrameworkNotFound", f"AgentProviderConfig {name} not found")
    else:
        readiness = framework_readiness(framework.config, discovered)  # instructions already appended
    framework_ready = StatusCondition.of(
        "FrameworkReady", readiness.ready, "FrameworkReady" if readiness.ready else readiness.reason, readiness.message, generation
    )
    if not readiness.ready or framework is None:
        waiting = [
            framework_ready,
            StatusCondition.of("ModelBound", False, "WaitingForFramework", "waiting for the framework", generation),
            StatusCondition.of("Ready", False, "WaitingForFramework", "waiting for the framework", generation),
        ]
        return status(generation, "Pending", "WaitingForFramework", waiting, fields), []
    outcome = bind(agent, framework.config, models, gateways)
    if isinstance(outcome, NotBound):
        phase = "Failed" if outcome.reason in PERMANENT else "Pending"
        unbound = [
            framework_ready,
            StatusCondition.of("ModelBound", False, outcome.reason, outcome.message, generation),
            StatusCondition.of("Ready", False, outcome.reason, outcome.message, generation),
        ]
        return status(generation, phase, outcome.reason, unbound, fields), []
    fields["modelBinding"] = outcome.binding
    bound = StatusCondition.of("ModelBound", True, "ModelBound", outcome.message, generation)
    try:
        rendered = render.render(agent, framework.config, uid, outcome.binding)
    except render.RenderError as exc:
        conditions = [framework_ready, bound, StatusCondition.of("Ready", False, exc.reason, str(exc), generation)]
        return status(generation, "Failed", exc.reason, conditions, fields, binding=outcome.binding), []
    fields["runtime"] = {"workloadRef": rendered.workload, **({"address": rendered.address} if rendered.address else {})}
    phase, reason, message, replicas = progress(observed, rendered.workload)
    if replicas is not None:
        fields["replicas"] = replicas
    ready = StatusCondition.of("Ready", phase in ("Running", "Completed"), reason, message, generation)
    decision = status(generation, phase, reason, [framework_ready, bound, ready], fields, binding=outcome.binding, objects=rendered.objects)
    return decision, rendered.objects


def progress(observed: Mapping[tuple[str, str], ObjectObserved], workload: dict[str, str]) -> tuple[str, str, str, dict[str, int] | None]:
    """(phase, reason, message, replicas) from what the cluster reports of the agent's primary object."""
    seen = observed.get((workload["kind"], workload["name"]))
    if seen is None or not seen.exists:
        return "Deploying", "WorkloadNotReady", f"{workload['kind']} {workload['name']} created, waiting for it to report", None
    summary = seen.summary
    conditions = {c.get("type"): c.get("status") for c in summary.get("conditions", [])}
    if workload["kind"] == "Deployment":
        available = int(summary.get("availableReplicas") or 0)
        replicas = {
            "desired": int(summary.get("replicas") or 1),
            "ready": int(summary.get("readyReplicas") or 0),
            "available": available,
        }
        if available > 0:
            return "Running", "WorkloadReady", "the agent is running", replicas
        return "Deploying", "WorkloadNotReady", "waiting for the agent's pods to be available", replicas
    if workload["kind"] == "Job":
        if conditions.get("Failed") == "True":
            return "Failed", "JobFailed", "the agent's Job failed", None
        if conditions.get("Complete") == "True" or int(summary.get("succeeded") or 0) > 0:
            return "Completed", "JobCompleted", "the agent's Job completed", None
        if int(summary.get("active") or 0) > 0:
            return "Running", "JobRunning", "the agent's Job is running", None
        return "Deploying", "JobPending", "waiting for the agent's Job to start", None
    if conditions.get("Ready") == "True":
        return "Running", "AgentReady", "the agent reports Ready", None
    return "Deploying", "AwaitingKagent", "waiting for kagent to report the Agent Ready", None


def status(
    generation: int,
    phase: str,
    reason: str,
    conditions: list[StatusCondition],
    fields: dict[str, Any],
    *,
    binding: dict[str, Any] | None = None,
    objects: list[dict[str, Any]] | None = None,
) -> AgentReconciled:
    message = next((c.message for c in conditions if c.status != "True"), "the agent is running")
    return AgentReconciled(
        generation=generation,
        binding=binding or {},
        reason=reason,
        objects=tuple(ref(o) for o in objects or []),
        status=StatusSlice(conditions=tuple(conditions), phase=phase, message=message, fields=fields),
    )


def failed(decision: AgentReconciled, reason: str, message: str) -> AgentReconciled:
    """The agent's objects could not be written: Failed, saying why, holding none of them."""
    conditions = tuple(
        c if c.type != "Ready" else StatusCondition.of("Ready", False, reason, message, decision.generation)
        for c in decision.status.conditions
    )
    return AgentReconciled(
        generation=decision.generation,
        binding=decision.binding,
        reason=reason,
        status=StatusSlice(conditions=conditions, phase="Failed", message=message, fields=decision.status.fields),
    )


def stale(previous: tuple[dict[str, Any], ...], objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the last decision held that the new one does not: deleted."""
    wanted = {(o["kind"], o["metadata"]["name"]) for o in objects}
    return [o for o in previous if (o["kind"], o["metadata"]["name"]) not in wanted]
