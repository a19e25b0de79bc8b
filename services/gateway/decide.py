"""The gateway control plane, purely: for one ModelDeployment, which Gateway, which objects, which status.

When the deployment runs and gateway integration is on (`spec.gateway.enabled`, by default
whenever InferencePools and HTTPRoutes are served): an InferencePool selecting its pods with
its endpoint picker, or the provider's own pool when its capabilities say
`managesInferencePool` (waited for until the watcher has seen it, `Inputs.pools`, with a
ReferenceGrant when that pool lives in another namespace); an HTTPRoute from the chosen
Gateway, matching the model name header, unless the user brought their own; and
`GatewayReady` with `status.gateway`. In a cluster a running deployment also
becomes a member of Jetway's own router, whatever the Gateway API says; an autoscaled one stays one while the
scaler has it at zero (labelled `jetway.dev/scale-from-zero` when its range allows zero, so the router holds its
requests while a replica starts).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contracts import scaling
from contracts.events import Decision, StatusCondition, StatusSlice
from contracts.gateway import GatewayReconciled, RoutesAdmitted
from contracts.gatewayapi import GatewayView, NoGateway, choose_gateway
from contracts.modeldeployment import ModelDeployment
from contracts.objects import (
    MODEL_DEPLOYMENT,
    MODEL_DEPLOYMENT_NAMESPACE,
    OWNER_UID,
    child_name,
    cluster_scoped_name,
    managed_labels,
    metadata,
    ref,
)
from contracts.poolmember import format_labels
from contracts.providerconfig import EngineGateway
from contracts.rules import dynamo as dynamo_rules
from contracts.subjects import Key

POOL_API = "inference.networking.k8s.io/v1"
ROUTE_API = "gateway.networking.k8s.io/v1"
GRANT_API = "gateway.networking.k8s.io/v1beta1"
MEMBER_API = "airdress.co/v1alpha1"
MODEL_HEADER = "X-Gateway-Model-Name"
EPP_PORT = 9002
EPP_HEALTH_PORT = 9003
DEFAULT_EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.1"
DEFAULT_EPP_CONFIG = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"


@dataclass(frozen=True)
class Inputs:
    key: Key
    uid: str
    generation: int
    md: ModelDeployment
    running: bool  # the workload reports Running
    endpoint: dict[str, Any] | None  # status.endpoint: {service, port}
    service_ip: str  # the model Service's cluster IP, as observed ("" unknown)
    capability: EngineGateway | None  # the provider's gateway capabilities for the engine in use
    apis: bool  # InferencePools and HTTPRoutes are served
    gateways: list[GatewayView] = field(default_factory=list)
    configured: str | None = None  # a Gateway chosen by configuration, "namespace/name"
    cluster: bool = True
    epp_image: str = DEFAULT_EPP_IMAGE
    api_formats: tuple[str, ...] = ()  # what the provider's engine speaks (its effective apiFormats); () unknown
    pools: Collection[str] = ()  # "namespace/name" of the providers' own InferencePools the watcher saw exist
    scaled_to_zero: bool = False  # the scaler took it to zero: its objects stand, no pod runs, and it serves again on demand
    from_zero: bool = False  # its autoscaling allows zero: the router holds its requests while it starts again


def serving(inputs: Inputs) -> bool:
    """Whether the deployment serves, or would on demand: it runs, or the scaler took it to zero."""
    return inputs.running or inputs.scaled_to_zero


def scale_state(md: ModelDeployment, decision: Decision | None) -> tuple[bool, bool]:
    """(scaled to zero, may go to zero) from the deployment's autoscaling and the scaler's last decision."""
    autoscaling = scaling.autoscaling_of(md)
    if autoscaling is None:
        return False, False
    return scaling.current_replicas(md, decision) == 0, autoscaling.minReplicas == 0


@dataclass(frozen=True)
class Write:
    """Objects written together; if they fail, GatewayReady says `reason`."""

    reason: str
    objects: list[dict[str, Any]]


@dataclass(frozen=True)
class Plan:
    decision: GatewayReconciled
    writes: list[Write] = field(default_factory=list)
    provider_pool: tuple[str, str] | None = None  # (namespace, name) of the provider's own pool it routes to
    gateway: GatewayView | None = None  # the chosen Gateway (for allowedRoutes)
    member: dict[str, Any] | None = None  # Jetway's router member for the deployment

    def objects(self) -> list[dict[str, Any]]:
        return [o for w in self.writes for o in w.objects] + ([self.member] if self.member else [])


def model_name(md: ModelDeployment, capability: EngineGateway | None) -> str:
    """`spec.gateway.modelName`, else `spec.model.servedName` (unless the provider ignores it), else `spec.model.id`."""
    if md.spec.gateway and md.spec.gateway.modelName:
        return md.spec.gateway.modelName
    if md.spec.model.servedName and not (capability and capability.ignoresServedName):
        return md.spec.model.servedName
    return md.spec.model.id or md.metadata.name


def enabled(md: ModelDeployment, apis: bool) -> tuple[bool, bool]:
    """(on, explicitly): on by default whenever the Inference Extension APIs are served."""
    explicit = md.spec.gateway.enabled if md.spec.gateway else None
    return (apis if explicit is None else explicit), explicit is not None


def decision(
    inputs: Inputs,
    ok: bool,
    reason: str,
    message: str,
    *,
    gateway: GatewayView | None = None,
    objects: list[dict[str, Any]] | None = None,
    fields: dict[str, Any] | None = None,
) -> GatewayReconciled:
    return GatewayReconciled(
        generation=inputs.generation,
        gateway=gateway.ref if gateway else "",
        reason=reason,
        objects=tuple(ref(o) for o in objects or []),
        status=StatusSlice(conditions=(StatusCondition.of("GatewayReady", ok, reason, message, inputs.generation),), fields=fields or {}),
    )


def _substitute(pattern: str | None, key: Key, default: str) -> str:
    return (pattern or default).replace("{name}", key.name).replace("{namespace}", key.namespace)


def provider_pool(key: Key, capability: EngineGateway | None) -> tuple[str, str] | None:
    """(namespace, name) of the provider's own InferencePool the deployment routes to, if the provider manages it."""
    if capability is None or not capability.managesInferencePool:
        return None
    return (
        _substitute(capability.inferencePoolNamespace, key, key.namespace),
        _substitute(capability.inferencePoolNamePattern, key, key.name),
    )


def _labels(key: Key) -> dict[str, str]:
    return {**managed_labels(), MODEL_DEPLOYMENT: key.name}


def pool_objects(inputs: Inputs, port: int) -> list[dict[str, Any]]:
    """The InferencePool for the deployment's pods and its endpoint picker (EPP) stack."""
    key, uid = inputs.key, inputs.uid
    epp = child_name(key.name, "-epp")  # a Service name and a label value: 63 characters at most
    labels = {**_labels(key), "app.kubernetes.io/name": epp, "app.kubernetes.io/instance": key.name}
    picker = inputs.capability.endpointPicker if inputs.capability else None
    pool = {
        "apiVersion": POOL_API,
        "kind": "InferencePool",
        "metadata": metadata(key.name, key, uid, _labels(key)),
        "spec": {
            "selector": {"matchLabels": {MODEL_DEPLOYMENT: key.name}},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": epp, "port": {"number": EPP_PORT}},
        },
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(epp, key, uid, labels)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(epp, key, uid, labels),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]},
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "watch", "list"]},
            {
                "apiGroups": ["inference.networking.x-k8s.io"],
                "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                "verbs": ["get", "watch", "list"],
            },
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(epp, key, uid, labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": epp},
        "subjects": [{"kind": "ServiceAccount", "name": epp, "namespace": key.namespace}],
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(epp, key, uid, labels),
        "data": {"default-plugins.yaml": (picker.configData if picker and picker.configData else DEFAULT_EPP_CONFIG)},
    }
    health = {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(epp, key, uid, labels),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": epp}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": epp,
                    "terminationGracePeriodSeconds": 130,
                    "containers": [
                        {
                            "name": "epp",
                            "image": picker.image if picker and picker.image else inputs.epp_image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": [
                                "--pool-name",
                                key.name,
                                "--pool-namespace",
                                key.namespace,
                                "--zap-encoder",
                                "json",
                                "--config-file",
                                "/config/default-plugins.yaml",
                                "--tracing=false",
                            ],
                            "ports": [
                                {"name": "grpc", "containerPort": EPP_PORT},
                                {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT},
                            ],
                            "env": [
                                {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            ],
                            "livenessProbe": {**health, "initialDelaySeconds": 30, "periodSeconds": 10, "timeoutSeconds": 5},
                            "readinessProbe": {**health, "periodSeconds": 5, "timeoutSeconds": 5},
                            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
                            "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": epp}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(epp, key, uid, labels),
        "spec": {
            "selector": {"app.kubernetes.io/name": epp},
            "ports": [
                {"name": "grpc-ext-proc", "port": EPP_PORT, "targetPort": EPP_PORT, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}
            ],
        },
    }
    return [account, role, binding, config, deployment, service, pool]


def route(inputs: Inputs, gateway: GatewayView, name: str, pool: tuple[str, str]) -> dict[str, Any]:
    backend: dict[str, Any] = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool[1]}
    if pool[0] != inputs.key.namespace:
        backend["namespace"] = pool[0]
    return {
        "apiVersion": ROUTE_API,
        "kind": "HTTPRoute",
        "metadata": metadata(inputs.key.name, inputs.key, inputs.uid, _labels(inputs.key)),
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name, "namespace": gateway.namespace}],
            "rules": [
                {
                    "matches": [
                        {"path": {"type": "PathPrefix", "value": "/"}, "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": name}]}
                    ],
                    "backendRefs": [backend],
                    "timeouts": {"request": "300s"},
                }
            ],
        },
    }


def reference_grant(inputs: Inputs, pool: tuple[str, str]) -> dict[str, Any]:
    """Lets the deployment's HTTPRoute reach the provider's pool in another namespace."""
    return {
        "apiVersion": GRANT_API,
        "kind": "ReferenceGrant",
        "metadata": {"name": f"{pool[1]}-referencegrant", "namespace": pool[0], "labels": _labels(inputs.key)},
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": inputs.key.namespace}],
            "to": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool[1]}],
        },
    }


def member(inputs: Inputs) -> dict[str, Any] | None:
    """The deployment as a member of Jetway's own router: its Service, by cluster IP."""
    if not inputs.cluster or not serving(inputs) or not inputs.endpoint or not inputs.service_ip or inputs.service_ip == "None":
        return None
    served = inputs.md.spec.model.servedName or inputs.md.spec.model.id or inputs.key.name
    # cluster-scoped (the spec ignores its namespace): named apart per namespace, owned by annotation
    labels = {**_labels(inputs.key), MODEL_DEPLOYMENT_NAMESPACE: inputs.key.namespace}
    if inputs.api_formats:  # the router sends it only the APIs its provider's engine speaks (services/router/apis.py)
        labels.update(format_labels(list(inputs.api_formats)))
    if inputs.from_zero:  # the router holds a request for it while it has no replica, and the scaler starts one
        labels[scaling.SCALE_FROM_ZERO] = "true"
    meta: dict[str, Any] = {"name": cluster_scoped_name(inputs.key), "labels": labels}
    if inputs.uid:
        meta["annotations"] = {OWNER_UID: inputs.uid}
    return {
        "apiVersion": MEMBER_API,
        "kind": "InferencePoolMember",
        "metadata": meta,
        "spec": {"backend": "vllm-openai", "url": f"http://{inputs.service_ip}:{inputs.endpoint['port']}", "models": [{"name": served}]},
    }


def plan(inputs: Inputs) -> Plan | None:
    """What to do about the deployment now; None while it does not run yet (nothing to decide)."""
    md = inputs.md
    on, explicit = enabled(md, inputs.apis)
    router_member = member(inputs)
    members = [router_member] if router_member else []
    if dynamo_rules.mocker(md):
        # AI Runway skips gateway reconciliation for the mocker before anything else: no objects, no GatewayReady
        # (whatever spec.gateway says, whether or not the APIs are served); Jetway's router member still stands
        mocker = GatewayReconciled(generation=inputs.generation, reason="DynamoMocker", objects=tuple(ref(o) for o in members))
        return Plan(mocker, member=router_member)
    if not inputs.apis:
        if explicit and on:
            message = "Gateway API Inference Extension CRDs are not installed in the cluster (InferencePool, HTTPRoute)"
            return Plan(decision(inputs, False, "CRDsNotAvailable", message, objects=members), member=router_member)
        # not asked for and not available: no GatewayReady at all, just the router member
        if router_member is None:
            return None
        silent = GatewayReconciled(generation=inputs.generation, reason="NoGatewayAPI", objects=(ref(router_member),))
        return Plan(silent, member=router_member)
    if not on:
        return Plan(
            decision(
                inputs,
                False,
                "GatewayDisabled",
                "gateway integration is disabled (spec.gateway.enabled: false)",
                objects=members,
            ),
            member=router_member,
        )
    if not serving(inputs):
        return None  # the Gateway sends traffic only to a deployment that runs (or is at zero, and starts on demand)
    chosen = choose_gateway(inputs.gateways, inputs.configured)
    if isinstance(chosen, NoGateway):
        return Plan(decision(inputs, False, "NoGateway", chosen.message, objects=members), member=router_member)
    capability = inputs.capability
    name = model_name(md, capability)
    writes: list[Write] = []
    providers = provider_pool(inputs.key, capability)
    if providers is not None:
        pool = providers
        if f"{pool[0]}/{pool[1]}" not in inputs.pools:  # the provider makes it once the workload runs: wait for it
            message = f"waiting for the provider's InferencePool {pool[0]}/{pool[1]}: it does not exist yet"
            return Plan(decision(inputs, False, "InferencePoolFailed", message, gateway=chosen), provider_pool=pool, gateway=chosen)
        if pool[0] != inputs.key.namespace:
            writes.append(Write("InferencePoolFailed", [reference_grant(inputs, pool)]))
    else:
        pool = (inputs.key.namespace, inputs.key.name)
        port = int((inputs.endpoint or {}).get("port") or 8000)
        writes.append(Write("InferencePoolFailed", pool_objects(inputs, port)))
    if not (md.spec.gateway and md.spec.gateway.httpRouteRef):
        writes.append(Write("HTTPRouteFailed", [route(inputs, chosen, name, pool)]))
    fields = {
        "gateway": {
            "gatewayName": chosen.name,
            "gatewayNamespace": chosen.namespace,
            "modelName": name,
            **({"endpoint": chosen.addresses[0]} if chosen.addresses else {}),
        }
    }
    objects = [o for w in writes for o in w.objects] + members
    message = (
        "InferencePool and HTTPRoute created" if not providers else f"HTTPRoute to the provider's InferencePool {pool[0]}/{pool[1]} created"
    )
    if md.spec.gateway and md.spec.gateway.httpRouteRef:
        message = f"InferencePool ready for the user's HTTPRoute {md.spec.gateway.httpRouteRef}"
    return Plan(
        decision(inputs, True, "GatewayConfigured", message, gateway=chosen, objects=objects, fields=fields),
        writes,
        providers,
        chosen,
        router_member,
    )


# The reasons with which a deployment routes through its Gateway: the Gateway's admission counts it.
ROUTING = ("GatewayConfigured", "GatewayPatchFailed")


def admission_patch(gateway: GatewayView, namespaces: set[str]) -> dict[str, Any] | None:
    """The allowedRoutes patch a Gateway needs so that HTTPRoutes from `namespaces` attach to it; None when it
    needs none (its listeners admit them already, or nothing cross-namespace and nothing of ours to take back)."""
    cross = namespaces - {gateway.namespace}
    if cross and allows(gateway, namespaces):
        return None
    if not cross and not selects(gateway):
        return None
    return allowed_routes(gateway, namespaces)


def admission_problem(admitted: RoutesAdmitted | None, namespace: str, gateway: str) -> str:
    """Why a deployment in `namespace` routing through `gateway` is not admitted by it ("" when it is, or the
    Gateway's admission has not been decided yet)."""
    if admitted is None or not admitted.error or namespace not in admitted.namespaces:
        return ""
    return f"cannot admit routes from namespace {namespace} on Gateway {gateway}: {admitted.error}"


def allowed_routes(gateway: GatewayView, namespaces: set[str]) -> dict[str, Any]:
    """The Gateway patch that lets HTTPRoutes from `namespaces` attach to every listener (none: our fields go)."""
    body: dict[str, Any] = {"apiVersion": ROUTE_API, "kind": "Gateway", "metadata": {"name": gateway.name, "namespace": gateway.namespace}}
    cross = sorted(namespaces - {gateway.namespace})
    if cross:
        selector = {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted({*cross, gateway.namespace})}]
        }
        body["spec"] = {
            "listeners": [
                {"name": item["name"], "allowedRoutes": {"namespaces": {"from": "Selector", "selector": selector}}}
                for item in gateway.listeners
            ]
        }
    return body


def allows(gateway: GatewayView, namespaces: set[str]) -> bool:
    """Whether every listener already admits routes from these namespaces (so no patch is needed)."""
    cross = namespaces - {gateway.namespace}
    for item in gateway.listeners:
        rule = ((item.get("allowedRoutes") or {}).get("namespaces")) or {}
        if rule.get("from") == "All":
            continue
        if rule.get("from") != "Selector":
            if cross:
                return False
            continue
        values = {v for e in (rule.get("selector") or {}).get("matchExpressions") or [] for v in e.get("values") or []}
        if not cross <= values:
            return False
    return True


def selects(gateway: GatewayView) -> bool:
    """Whether any listener admits routes by namespace selector (possibly written by Jetway before)."""
    return any(((item.get("allowedRoutes") or {}).get("namespaces") or {}).get("from") == "Selector" for item in gateway.listeners)


def regenerated(last: GatewayReconciled, generation: int) -> GatewayReconciled:
    """The standing decision, restated for a new generation (nothing to change while the deployment does not run)."""
    conditions = tuple(msgspec.structs.replace(c, observedGeneration=generation) for c in last.status.conditions)
    return msgspec.structs.replace(last, generation=generation, status=msgspec.structs.replace(last.status, conditions=conditions))
