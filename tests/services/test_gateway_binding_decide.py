"""The pure decisions of the gateway control plane and the binding service, without I/O."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import admit
from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.cluster import ApisDiscovered
from contracts.gatewayapi import GatewayView, NoGateway, Unresolved, choose_gateway, listener_url, normalize_endpoint, select_listener
from contracts.modeldeployment import ModelDeployment
from contracts.providerconfig import EngineGateway
from contracts.subjects import Key
from services.binding import decide
from services.gateway import decide as control_plane
from tests.contracts.cases import MD, changed

READY = {t: {"status": "True", "observedGeneration": 1} for t in ("Accepted", "ResolvedRefs", "Programmed")}


def gateway(
    name: str = "gw",
    namespace: str = "default",
    *,
    labels: dict[str, str] | None = None,
    listeners: list[dict[str, Any]] | None = None,
    addresses: tuple[str, ...] = ("203.0.113.1",),
    ready: tuple[str, ...] = ("http",),
    generation: int = 1,
) -> GatewayView:
    return GatewayView(
        namespace,
        name,
        generation,
        labels or {},
        tuple(listeners or [{"name": "http", "port": 80, "protocol": "HTTP"}]),
        addresses,
        {n: READY for n in ready},
    )


def md(**changes: Any) -> ModelDeployment:
    verdict = admit(changed(MD, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return verdict.obj


def test_the_gateway_is_the_configured_one_else_the_only_one_else_the_labelled_one() -> None:
    a, b = gateway("a"), gateway("b", labels={"airunway.ai/inference-gateway": "true"})
    assert choose_gateway([a], None) == a
    assert choose_gateway([a, b], None) == b
    assert choose_gateway([a, b], "default/a") == a
    assert isinstance(choose_gateway([a, b], "default/c"), NoGateway)
    assert "none labelled" in choose_gateway([a, gateway("c")], None).message  # type: ignore[union-attr]


def test_listener_selection_and_urls() -> None:
    two = [{"name": "a", "port": 80, "protocol": "HTTP"}, {"name": "b", "port": 443, "protocol": "HTTPS", "hostname": "m.example.com"}]
    gw = gateway(listeners=two, ready=("a", "b"))
    assert isinstance(select_listener(gw, None), Unresolved)
    chosen = select_listener(gw, "b")
    assert isinstance(chosen, dict) and listener_url(gw, chosen) == "https://m.example.com:443/v1"
    stale = gateway(generation=2)  # conditions observed for generation 1 are not current
    assert select_listener(stale, None) == Unresolved(
        "ListenerNotReady", "listener http of Gateway default/gw does not report Accepted, ResolvedRefs, Programmed as true"
    )
    tls_only_routes = gateway(
        listeners=[{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}]}}]
    )
    assert select_listener(tls_only_routes, None).reason == "NoCompatibleListener"  # type: ignore[union-attr]
    v6 = gateway(addresses=("2001:db8::1",))
    assert listener_url(v6, v6.listeners[0]) == "http://[2001:db8::1]:80/v1"
    assert normalize_endpoint(" 10.0.0.1/ ") == "http://10.0.0.1/v1" and normalize_endpoint("https://gw/v1") == "https://gw/v1"


def test_the_model_name_for_routing() -> None:
    assert control_plane.model_name(md(), None) == "Qwen/Qwen3-0.6B"
    assert control_plane.model_name(md(**{"spec.model.servedName": "small"}), None) == "small"
    assert control_plane.model_name(md(**{"spec.model.servedName": "small"}), EngineGateway(ignoresServedName=True)) == "Qwen/Qwen3-0.6B"
    assert control_plane.model_name(md(**{"spec.model.servedName": "small", "spec.gateway": {"modelName": "route-me"}}), None) == "route-me"


def inputs(deployment: ModelDeployment, **overrides: Any) -> control_plane.Inputs:
    base: dict[str, Any] = {
        "key": Key("ModelDeployment", "default", "qwen"),
        "uid": "u",
        "generation": 1,
        "md": deployment,
        "running": True,
        "endpoint": {"service": "qwen", "port": 8000},
        "service_ip": "",
        "capability": None,
        "apis": True,
        "gateways": [gateway()],
    }
    return control_plane.Inputs(**{**base, **overrides})


def test_plans() -> None:
    assert control_plane.plan(inputs(md(), apis=False)) is None  # not asked for, not available, no member: silent
    crds = control_plane.plan(inputs(md(**{"spec.gateway": {"enabled": True}}), apis=False))
    assert crds is not None and crds.decision.reason == "CRDsNotAvailable" and not crds.writes
    assert control_plane.plan(inputs(md(), running=False)) is None
    off = control_plane.plan(inputs(md(**{"spec.gateway": {"enabled": False}})))
    assert off is not None and off.decision.reason == "GatewayDisabled" and not off.objects()
    same_namespace_pool = EngineGateway(
        managesInferencePool=True, inferencePoolNamePattern="{name}-pool", inferencePoolNamespace="{namespace}"
    )
    managed = control_plane.plan(inputs(md(), capability=same_namespace_pool, pools={"default/qwen-pool"}))
    assert managed is not None and managed.provider_pool == ("default", "qwen-pool")
    assert [o["kind"] for o in managed.objects()] == ["HTTPRoute"]  # no grant in the same namespace, no pool of ours
    # the provider's pool not seen yet (the watcher records it when it is): wait, writing nothing, not even the member
    waiting = control_plane.plan(inputs(md(), capability=same_namespace_pool, pools={"default/qwen"}, service_ip="10.1.2.3"))
    assert waiting is not None and not waiting.objects() and waiting.decision.reason == "InferencePoolFailed"
    (ready,) = waiting.decision.status.conditions
    assert ready.status == "False" and ready.message == "waiting for the provider's InferencePool default/qwen-pool: it does not exist yet"
    member = control_plane.plan(inputs(md(), service_ip="10.1.2.3"))
    assert member is not None and member.member is not None and member.member["spec"]["url"] == "http://10.1.2.3:8000"


MOCKER = {"metadata.annotations": {"airunway.ai/dynamo-test-backend": "mocker"}, "spec.provider": {"name": "dynamo"}}


def test_gateway_dynamo_mocker_skips_creation() -> None:
    """AI Runway's TestGateway_DynamoMockerSkipsCreation: gateway left at its default (on), the Inference
    Extension served, a Gateway to route through; only the mocker annotation keeps the control off the
    gateway path: no InferencePool, no HTTPRoute, and no GatewayReady condition (neither true nor false)."""
    plan = control_plane.plan(inputs(md(**MOCKER)))
    assert plan is not None and not plan.writes and plan.provider_pool is None and plan.gateway is None
    kinds = [o["kind"] for o in plan.objects()]
    assert "InferencePool" not in kinds and "HTTPRoute" not in kinds and not kinds
    assert plan.decision.status.conditions == () and plan.decision.gateway == "" and plan.decision.reason == "DynamoMocker"
    # Jetway's own router still takes the deployment (not a Gateway API object)
    routed = control_plane.plan(inputs(md(**MOCKER), service_ip="10.1.2.3"))
    assert routed is not None and [o["kind"] for o in routed.objects()] == ["InferencePoolMember"] and not routed.decision.status.conditions
    # skipped before the APIs are looked at: explicitly enabled without the CRDs says nothing either
    crds = control_plane.plan(inputs(md(**MOCKER, **{"spec.gateway": {"enabled": True}}), apis=False))
    assert crds is not None and crds.decision.status.conditions == () and not crds.writes
    # the annotation alone, without the Dynamo provider named, is not the mocker (isDynamoMockerMode)
    plain = control_plane.plan(inputs(md(**{"metadata.annotations": {"airunway.ai/dynamo-test-backend": "mocker"}})))
    assert plain is not None and plain.decision.reason == "GatewayConfigured"


def test_allowed_routes_patch_and_its_removal() -> None:
    shared = gateway(namespace="infra")
    body = control_plane.allowed_routes(shared, {"default", "team-a"})
    values = body["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["values"]
    assert values == ["default", "infra", "team-a"]
    assert "spec" not in control_plane.allowed_routes(shared, {"infra"})  # nothing cross-namespace: our fields go
    patched = gateway(namespace="infra", listeners=[{"name": "http", "port": 80, "protocol": "HTTP", **body["spec"]["listeners"][0]}])
    assert control_plane.allows(patched, {"default"}) and not control_plane.allows(patched, {"team-b"}) and control_plane.selects(patched)


def framework(**capabilities: Any) -> AgentProviderConfig:
    return AgentProviderConfig.model_validate(
        {
            "metadata": {"name": "f", "annotations": {"airunway.ai/install-instructions": "Run the installer."}},
            "spec": {"capabilities": capabilities},
        }
    )


@pytest.mark.parametrize(
    ("capabilities", "served", "ready", "reason"),
    [
        ({"backend": "container"}, (), True, "ContainerBackend"),
        ({"backend": "crd", "requiresOperator": True}, (), False, "OperatorAPIGroupMissing"),
        ({"backend": "crd", "requiresOperator": True, "operatorAPIGroup": "kagent.dev/v1alpha2"}, (), False, "OperatorNotInstalled"),
        (
            {"backend": "crd", "requiresOperator": True, "operatorAPIGroup": "kagent.dev/v1alpha2"},
            ("kagent.dev/v1alpha2/agents",),
            True,
            "OperatorInstalled",
        ),
        (
            {"backend": "crd", "requiresOperator": True, "operatorAPIGroup": "kagent.dev"},
            ("kagent.dev/v1alpha1/agents",),
            True,
            "OperatorInstalled",
        ),
        (
            {"backend": "crd", "requiresOperator": True, "operatorAPIGroup": "kagent.dev/v1alpha2"},
            ("kagent.dev/v1alpha1/agents",),
            False,
            "OperatorNotInstalled",
        ),
    ],
)
def test_framework_readiness(capabilities: dict[str, Any], served: tuple[str, ...], ready: bool, reason: str) -> None:
    found = decide.framework_readiness(framework(**capabilities), ApisDiscovered(resources=served))
    assert (found.ready, found.reason) == (ready, reason)
    assert found.message.endswith("Run the installer.") == (not ready)


def agent(**model: Any) -> AgentDeployment:
    return AgentDeployment.model_validate(
        {"metadata": {"name": "a", "namespace": "default"}, "spec": {"framework": {"name": "f"}, "model": model}}
    )


def test_deployment_ref_in_the_specs_order() -> None:
    view = decide.ModelView(
        md(),
        "uid",
        {"gatewayName": "gw", "gatewayNamespace": "default", "endpoint": "198.51.100.4", "modelName": "q"},
        {"service": "qwen", "port": 8000},
    )
    ref = agent(deploymentRef={"name": "qwen"})
    one = decide.bind_deployment_ref(ref, view, {"default/gw": gateway()})
    assert isinstance(one, decide.Bound) and one.binding["baseURL"] == "http://203.0.113.1:80/v1" and one.binding["modelName"] == "q"
    several = gateway(
        listeners=[{"name": "http", "port": 80, "protocol": "HTTP"}, {"name": "alt", "port": 81, "protocol": "HTTP"}], ready=("http", "alt")
    )
    kept = decide.bind_deployment_ref(ref, view, {"default/gw": several})
    assert isinstance(kept, decide.Bound) and kept.binding["baseURL"] == "http://198.51.100.4/v1"
    none_ready = decide.bind_deployment_ref(ref, view, {"default/gw": gateway(ready=())})
    assert isinstance(none_ready, decide.Bound) and none_ready.binding["baseURL"] == "http://qwen.default.svc.cluster.local:8000/v1"
    no_gateway = decide.bind_deployment_ref(ref, decide.ModelView(md(), "uid", {}, {"service": "qwen", "port": 8000}), {})
    assert isinstance(no_gateway, decide.Bound) and "svc.cluster.local" in no_gateway.binding["baseURL"]
    never_derived = decide.bind_deployment_ref(
        ref, decide.ModelView(md(), "uid", {"gatewayName": "gw", "gatewayNamespace": "default"}, None), {}
    )
    assert never_derived == decide.NotBound(
        "ModelDeploymentNotReady", "ModelDeployment default/qwen has no endpoint yet"
    )  # not gw.default.svc


def test_binding_mode_must_be_one_the_framework_supports() -> None:
    config = framework(backend="container", modelBindingModes=["externalAPI"])
    outcome = decide.bind(agent(deploymentRef={"name": "qwen"}), config, {}, {})
    assert isinstance(outcome, decide.NotBound) and outcome.reason == "UnsupportedBindingMode"


def test_a_generated_member_accepts_the_apis_its_provider_speaks() -> None:
    speaks = control_plane.member(inputs(md(), service_ip="10.0.0.7", api_formats=("openai-chat", "anthropic-messages")))
    assert speaks is not None
    labels = speaks["metadata"]["labels"]
    assert labels["formats.jetway.dev/anthropic-messages"] == "true"
    assert labels["formats.jetway.dev/openai-responses"] == "false"
    unknown = control_plane.member(inputs(md(), service_ip="10.0.0.7"))
    assert unknown is not None and not any(name.startswith("formats.jetway.dev/") for name in unknown["metadata"]["labels"])
