"""The gateway service's control plane on the emulator: Gateway API Inference Extension objects for
running ModelDeployments, the Gateway they route through, `GatewayReady` and `status.gateway`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.cluster import Cluster, foreign_crd, gateway_api_crds
from tests.support.controller import Controller, running_controller
from tests.support.kubecases import MDV, TIMEOUT, condition, get_md, get_obj, listener, make_gateway, running_md
from tests.support.nats import NatsEndpoint
from tests.support.waiting import eventually

POOL = "inference.networking.k8s.io/v1"
ROUTES = "gateway.networking.k8s.io/v1"


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    cluster.need_emulator()  # installs the Gateway API's CRDs and plays its controllers: not for a shared cluster
    async with running_controller(nats.url, cluster) as running:
        yield running


async def with_gateway_apis(cluster: Cluster) -> None:
    emulator = cluster.need_emulator()
    for crd in gateway_api_crds():
        emulator.install(crd)
    await cluster.kube.discover()


async def gateway_ready(cluster: Cluster, reason: str, name: str = "qwen") -> dict[str, Any] | None:
    md = await get_md(cluster, name)
    return md if md and condition(md, "GatewayReady").get("reason") == reason else None


async def wait_reason(cluster: Cluster, reason: str, name: str = "qwen") -> dict[str, Any]:
    found: dict[str, Any] = await eventually(
        lambda: gateway_ready(cluster, reason, name), timeout=TIMEOUT, message=f"GatewayReady {reason}"
    )
    return found


async def test_with_one_gateway_a_running_deployment_gets_its_pool_picker_and_route(controller: Controller, cluster: Cluster) -> None:
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "inference", "default", [listener("http", 80)], addresses=["203.0.113.7"], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayConfigured")
    ready = condition(md, "GatewayReady")
    assert ready["status"] == "True" and ready["message"] == "InferencePool and HTTPRoute created"
    assert md["status"]["gateway"] == {
        "gatewayName": "inference",
        "gatewayNamespace": "default",
        "endpoint": "203.0.113.7",
        "modelName": "Qwen/Qwen3-0.6B",
    }
    assert md["status"]["phase"] == "Running"

    pool = await cluster.kube.get(POOL, "InferencePool", "qwen", "default")
    assert pool["spec"] == {
        "selector": {"matchLabels": {"airunway.ai/model-deployment": "qwen"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"name": "qwen-epp", "port": {"number": 9002}},
    }
    assert pool["metadata"]["ownerReferences"][0]["uid"] == md["metadata"]["uid"]
    for kind, api in (
        ("Deployment", "apps/v1"),
        ("Service", "v1"),
        ("ServiceAccount", "v1"),
        ("ConfigMap", "v1"),
        ("Role", "rbac.authorization.k8s.io/v1"),
        ("RoleBinding", "rbac.authorization.k8s.io/v1"),
    ):
        assert await get_obj(cluster, api, kind, "qwen-epp"), f"the endpoint picker's {kind}"
    route = await cluster.kube.get(ROUTES, "HTTPRoute", "qwen", "default")
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference", "namespace": "default"}
    ]
    rule = route["spec"]["rules"][0]
    assert rule["matches"][0]["headers"] == [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": "Qwen/Qwen3-0.6B"}]
    assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen"}]


async def test_without_the_crds_an_explicit_gateway_says_so_and_nothing_else_fails(controller: Controller, cluster: Cluster) -> None:
    await running_md(cluster, **{"spec.gateway": {"enabled": True}})
    md = await wait_reason(cluster, "CRDsNotAvailable")
    assert condition(md, "GatewayReady")["status"] == "False" and md["status"]["phase"] == "Running"
    assert "gateway" not in md["status"]
    # the APIs arrive: discovery notices, and the same deployment is routed
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "inference", "default", [listener("http")], ready=["http"])
    await wait_reason(cluster, "GatewayConfigured")
    assert await get_obj(cluster, POOL, "InferencePool", "qwen")


async def test_without_the_crds_and_not_asked_for_there_is_no_gateway_condition(controller: Controller, cluster: Cluster) -> None:
    md = await running_md(cluster)
    assert condition(md, "GatewayReady") == {}


@pytest.mark.parametrize(
    ("gateways", "expected"),
    [
        ([], "no Gateway resources found in the cluster"),
        ([("a", {}), ("b", {})], "2 Gateways found but none labelled airunway.ai/inference-gateway=true"),
        ([("a", {"airunway.ai/inference-gateway": "true"}), ("b", {"airunway.ai/inference-gateway": "true"})], "2 Gateways are labelled"),
    ],
)
async def test_no_gateway_says_which_case_it_is(
    controller: Controller, cluster: Cluster, gateways: list[tuple[str, dict[str, str]]], expected: str
) -> None:
    await with_gateway_apis(cluster)
    for name, labels in gateways:
        await make_gateway(cluster, name, "default", [listener("http")], labels=labels, ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "NoGateway")
    assert expected in condition(md, "GatewayReady")["message"]
    assert await get_obj(cluster, ROUTES, "HTTPRoute", "qwen") is None


async def test_of_several_gateways_the_labelled_one_is_chosen(controller: Controller, cluster: Cluster) -> None:
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "public", "default", [listener("http")], ready=["http"])
    await make_gateway(
        cluster, "inference", "default", [listener("http")], labels={"airunway.ai/inference-gateway": "true"}, ready=["http"]
    )
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayConfigured")
    assert md["status"]["gateway"]["gatewayName"] == "inference"


async def test_a_gateway_in_another_namespace_admits_the_route_until_it_is_gone(controller: Controller, cluster: Cluster) -> None:
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "shared", "gateway-system", [listener("http"), listener("https", 443, "HTTPS")], ready=["http"])
    await running_md(cluster)
    await wait_reason(cluster, "GatewayConfigured")

    async def admitted() -> list[Any] | None:
        gateway = await cluster.kube.get(ROUTES, "Gateway", "shared", "gateway-system")
        rules = [item.get("allowedRoutes") for item in gateway["spec"]["listeners"]]
        return rules if all(rules) else None

    rules = await eventually(admitted, timeout=TIMEOUT, message="allowedRoutes on every listener")
    expression = rules[0]["namespaces"]["selector"]["matchExpressions"][0]
    assert rules[0]["namespaces"]["from"] == "Selector" and expression["values"] == ["default", "gateway-system"]
    await cluster.kube.delete(MDV, "ModelDeployment", "qwen", cluster.namespace)

    async def withdrawn() -> bool:
        gateway = await cluster.kube.get(ROUTES, "Gateway", "shared", "gateway-system")
        return not any(item.get("allowedRoutes") for item in gateway["spec"]["listeners"]) and await get_md(cluster) is None

    await eventually(withdrawn, timeout=TIMEOUT, message="allowedRoutes removed with the deployment")
    assert (await cluster.kube.get(ROUTES, "Gateway", "shared", "gateway-system"))["spec"]["listeners"][1]["port"] == 443  # the rest intact


async def test_a_provider_managed_pool_in_another_namespace_is_waited_for_and_granted(controller: Controller, cluster: Cluster) -> None:
    emulator = cluster.need_emulator()
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "inference", "default", [listener("http")], ready=["http"])
    emulator.install(foreign_crd("nvidia.com", "v1alpha1", "DynamoGraphDeployment", "dynamographdeployments"))
    await cluster.kube.discover()
    # the provider keeps its pools in one namespace, named after the deployment
    await eventually(lambda: get_obj(cluster, MDV, "InferenceProviderConfig", "dynamo"), timeout=TIMEOUT, message="dynamo registered")
    config = await cluster.kube.get(MDV, "InferenceProviderConfig", "dynamo")
    for engine in config["spec"]["capabilities"]["engines"]:
        engine["gateway"] = {
            "managesInferencePool": True,
            "inferencePoolNamePattern": "{namespace}-{name}-pool",
            "inferencePoolNamespace": "pools",
        }
    await cluster.kube.patch(config, {"spec": config["spec"]})
    await cluster.kube.create(
        {**_md("qwen", cluster.namespace), "spec": {**_md("qwen", cluster.namespace)["spec"], "provider": {"name": "dynamo"}}}
    )
    dgd = await eventually(lambda: get_obj(cluster, "nvidia.com/v1alpha1", "DynamoGraphDeployment", "qwen"), timeout=TIMEOUT, message="DGD")
    await cluster.kube.patch(dgd, {"status": {"state": "successful"}}, subresource="status")
    md = await wait_reason(cluster, "InferencePoolFailed")
    assert "waiting for the provider's InferencePool pools/default-qwen-pool" in condition(md, "GatewayReady")["message"]
    assert await get_obj(cluster, POOL, "InferencePool", "qwen") is None  # the provider's to create, not Jetway's

    await cluster.kube.create(
        {
            "apiVersion": POOL,
            "kind": "InferencePool",
            "metadata": {"name": "default-qwen-pool", "namespace": "pools"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 8000}]},
        }
    )
    await wait_reason(cluster, "GatewayConfigured")
    route = await cluster.kube.get(ROUTES, "HTTPRoute", "qwen", "default")
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "default-qwen-pool", "namespace": "pools"}
    ]
    grant = await cluster.kube.get("gateway.networking.k8s.io/v1beta1", "ReferenceGrant", "default-qwen-pool-referencegrant", "pools")
    assert grant["spec"]["from"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "default"}]
    assert grant["spec"]["to"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "default-qwen-pool"}]


def _md(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": MDV,
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}, "resources": {"gpu": {"count": 1}}},
    }


async def test_the_users_own_httproute_is_left_to_them(controller: Controller, cluster: Cluster) -> None:
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "inference", "default", [listener("http")], ready=["http"])
    await running_md(cluster, **{"spec.gateway": {"httpRouteRef": "my-route"}})
    md = await wait_reason(cluster, "GatewayConfigured")
    assert "my-route" in condition(md, "GatewayReady")["message"]
    assert await get_obj(cluster, POOL, "InferencePool", "qwen") and await get_obj(cluster, ROUTES, "HTTPRoute", "qwen") is None


async def test_turning_the_gateway_off_removes_what_jetway_created(controller: Controller, cluster: Cluster) -> None:
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "inference", "default", [listener("http")], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayConfigured")
    await cluster.kube.patch(md, {"spec": {"gateway": {"enabled": False}}})
    md = await wait_reason(cluster, "GatewayDisabled")
    assert condition(md, "GatewayReady")["status"] == "False" and "gateway" not in md["status"]

    async def removed() -> bool:
        left = [
            await get_obj(cluster, POOL, "InferencePool", "qwen"),
            await get_obj(cluster, ROUTES, "HTTPRoute", "qwen"),
            await get_obj(cluster, "apps/v1", "Deployment", "qwen-epp"),
        ]
        return left == [None, None, None]

    await eventually(removed, timeout=TIMEOUT, message="pool, route and picker removed")
    assert await get_obj(cluster, "apps/v1", "Deployment", "qwen")  # the model itself keeps running


@pytest.mark.parametrize(
    ("kind", "api", "reason"), [("InferencePool", POOL, "InferencePoolFailed"), ("HTTPRoute", ROUTES, "HTTPRouteFailed")]
)
async def test_a_write_that_fails_names_its_step(controller: Controller, cluster: Cluster, kind: str, api: str, reason: str) -> None:
    cluster.need_emulator().forbidden.add(("PATCH", kind))
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "inference", "default", [listener("http")], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, reason)
    assert "forbidden" in condition(md, "GatewayReady")["message"] and md["status"]["phase"] == "Running"


async def test_a_gateway_that_cannot_be_patched_is_gateway_patch_failed(controller: Controller, cluster: Cluster) -> None:
    cluster.need_emulator().forbidden.add(("PATCH", "Gateway"))
    await with_gateway_apis(cluster)
    await make_gateway(cluster, "shared", "gateway-system", [listener("http")], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayPatchFailed")
    assert "gateway-system/shared" in condition(md, "GatewayReady")["message"]


async def test_a_running_deployment_becomes_a_member_of_jetways_router(controller: Controller, cluster: Cluster) -> None:
    await running_md(cluster)
    service = await cluster.kube.get("v1", "Service", "qwen", cluster.namespace)
    await cluster.kube.patch(service, {"spec": {"clusterIP": "10.96.12.34"}})  # what the API server would have allocated
    member = await eventually(
        lambda: get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", "qwen"), timeout=TIMEOUT, message="the router member"
    )
    spec = member["spec"]
    assert (spec["backend"], spec["url"], spec["models"]) == ("vllm-openai", "http://10.96.12.34:8000", [{"name": "Qwen/Qwen3-0.6B"}])
    assert member["metadata"]["ownerReferences"][0]["kind"] == "ModelDeployment"
