"""The gateway service's control plane on the emulator and on a real API server: Gateway API Inference
Extension objects for running ModelDeployments, the Gateway they route through, `GatewayReady` and
`status.gateway`.

On a real server the CRDs are upstream's own (testbed/cluster/thirdparty.py), so their defaults and
CEL rules apply; the test plays the Gateway's controller (its status subresource) and the kubelet
(`report_pods`); a refused write is a real RBAC refusal of the gateway service's own identity."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.kube import NotFound
from testbed.controller import Controller, running_controller
from testbed.kubeapi import Cluster, foreign_crd
from testbed.waiting import eventually
from tests.support.kubecases import MDV, TIMEOUT, condition, get_md, get_obj, listener, make_gateway, running_md
from tests.support.nats import NatsEndpoint

POOL = "inference.networking.k8s.io/v1"
ROUTES = "gateway.networking.k8s.io/v1"


RBAC = Path(__file__).resolve().parents[2] / "deploy" / "base" / "rbac.yaml"


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    cluster.need_cluster_wide()  # installs the Gateway API's CRDs: not on a shared cluster
    async with running_controller(nats.url, cluster) as running:
        yield running


@pytest.fixture
async def wide_controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    """For a Gateway in another namespace: the watcher watches every namespace (its default), as a
    watcher of one namespace never sees that Gateway."""
    cluster.need_cluster_wide()
    if cluster.real:
        await eventually(lambda: alone(cluster), timeout=60, message="no other test's ModelDeployments left")
    async with running_controller(nats.url, cluster, all_namespaces=True) as running:
        yield running


async def alone(cluster: Cluster) -> bool:
    """No ModelDeployment outside the test's namespace (an earlier test's, in a namespace still going)."""
    try:
        items, _ = await cluster.kube.list(MDV, "ModelDeployment")
    except NotFound:
        return True
    return all(i["metadata"]["namespace"] == cluster.namespace for i in items)


def gateway_rules_without(resource: str, verb: str) -> list[dict[str, Any]]:
    """deploy/'s rules for the gateway service, less `verb` on `resource`."""
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    role = next(d for d in documents if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "jetway-gateway")
    rules = []
    for rule in role["rules"]:
        if resource in rule["resources"]:
            rules.append({**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]})
            rest = [r for r in rule["resources"] if r != resource]
            if rest:
                rules.append({**rule, "resources": rest})
        else:
            rules.append(rule)
    return rules


async def forbid(cluster: Cluster, controller: Controller, resource: str, verb: str) -> None:
    """Take `verb` on `resource` away from the gateway service: on a real server by RBAC (its own
    ServiceAccount, holding deploy/'s jetway-gateway rules less that verb); the emulator has no RBAC
    and answers 403 through its hook."""
    if cluster.emulator is not None:
        kind = {"inferencepools": "InferencePool", "httproutes": "HTTPRoute", "gateways": "Gateway"}[resource]
        cluster.emulator.forbidden.add((verb.upper(), kind))
        return
    controller.identities["gateway"] = await cluster.identity("jetway-gateway", gateway_rules_without(resource, verb))
    await controller.restart("gateway")


async def gateway_ready(cluster: Cluster, reason: str, name: str = "qwen") -> dict[str, Any] | None:
    md = await get_md(cluster, name)
    return md if md and condition(md, "GatewayReady").get("reason") == reason else None


async def wait_reason(cluster: Cluster, reason: str, name: str = "qwen") -> dict[str, Any]:
    found: dict[str, Any] = await eventually(
        lambda: gateway_ready(cluster, reason, name), timeout=TIMEOUT, message=f"GatewayReady {reason}"
    )
    return found


def backends(rule: dict[str, Any]) -> list[dict[str, Any]]:
    """A rule's backendRefs as Jetway wrote them: upstream's HTTPRoute CRD defaults `weight` to 1."""
    return [{k: v for k, v in ref.items() if k != "weight"} for ref in rule["backendRefs"]]


def selector_namespaces(listener: dict[str, Any]) -> list[str] | None:
    """The namespaces a listener admits routes from by selector (Jetway's allowedRoutes), if it does."""
    namespaces = (listener.get("allowedRoutes") or {}).get("namespaces") or {}
    if namespaces.get("from") != "Selector":
        return None  # none, or upstream's default (`from: Same`) once Jetway's fields are gone
    return [v for e in namespaces["selector"]["matchExpressions"] for v in e["values"]]


async def test_with_one_gateway_a_running_deployment_gets_its_pool_picker_and_route(controller: Controller, cluster: Cluster) -> None:
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http", 80)], addresses=["203.0.113.7"], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayConfigured")
    ready = condition(md, "GatewayReady")
    assert ready["status"] == "True" and ready["message"] == "InferencePool and HTTPRoute created"
    assert md["status"]["gateway"] == {
        "gatewayName": "inference",
        "gatewayNamespace": cluster.namespace,
        "endpoint": "203.0.113.7",
        "modelName": "Qwen/Qwen3-0.6B",
    }
    assert md["status"]["phase"] == "Running"

    pool = await cluster.kube.get(POOL, "InferencePool", "qwen", cluster.namespace)
    picker = pool["spec"]["endpointPickerRef"]  # upstream's CRD defaults its group, kind and failureMode
    # and, from v1.5.0, appProtocol to http: what Jetway wrote is the rest
    assert pool["spec"].get("appProtocol", "http") == "http"
    assert {k: v for k, v in pool["spec"].items() if k not in ("endpointPickerRef", "appProtocol")} == {
        "selector": {"matchLabels": {"airunway.ai/model-deployment": "qwen"}},
        "targetPorts": [{"number": 8000}],
    }
    assert (picker["name"], picker["port"], picker.get("kind", "Service")) == ("qwen-epp", {"number": 9002}, "Service")
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
    route = await cluster.kube.get(ROUTES, "HTTPRoute", "qwen", cluster.namespace)
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference", "namespace": cluster.namespace}
    ]
    rule = route["spec"]["rules"][0]
    assert rule["matches"][0]["headers"] == [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": "Qwen/Qwen3-0.6B"}]
    assert backends(rule) == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen"}]


async def test_without_the_crds_an_explicit_gateway_says_so_and_nothing_else_fails(controller: Controller, cluster: Cluster) -> None:
    await running_md(cluster, **{"spec.gateway": {"enabled": True}})

    async def running_without() -> dict[str, Any] | None:  # the phase is read with the condition: each is written on its own
        md = await gateway_ready(cluster, "CRDsNotAvailable")
        return md if md and md["status"]["phase"] == "Running" else None

    md = await eventually(running_without, timeout=TIMEOUT, message="Running, GatewayReady CRDsNotAvailable")
    assert condition(md, "GatewayReady")["status"] == "False"
    assert "gateway" not in md["status"]
    # the APIs arrive: discovery notices, and the same deployment is routed
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http")], ready=["http"])
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
    await cluster.install_gateway_apis()
    for name, labels in gateways:
        await make_gateway(cluster, name, cluster.namespace, [listener("http")], labels=labels, ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "NoGateway")
    assert expected in condition(md, "GatewayReady")["message"]
    assert await get_obj(cluster, ROUTES, "HTTPRoute", "qwen") is None


async def test_of_several_gateways_the_labelled_one_is_chosen(controller: Controller, cluster: Cluster) -> None:
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "public", cluster.namespace, [listener("http")], ready=["http"])
    await make_gateway(
        cluster, "inference", cluster.namespace, [listener("http")], labels={"airunway.ai/inference-gateway": "true"}, ready=["http"]
    )
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayConfigured")
    assert md["status"]["gateway"]["gatewayName"] == "inference"


async def test_a_gateway_in_another_namespace_admits_the_route_until_it_is_gone(wide_controller: Controller, cluster: Cluster) -> None:
    await cluster.install_gateway_apis()
    shared = await cluster.other_namespace("gateway-system")
    https = listener("https", 443, "HTTPS", tls={"mode": "Terminate", "certificateRefs": [{"name": "shared-tls"}]})
    await make_gateway(cluster, "shared", shared, [listener("http"), https], ready=["http"])
    await running_md(cluster)
    await wait_reason(cluster, "GatewayConfigured")

    async def admitted() -> list[list[str] | None] | None:
        gateway = await cluster.kube.get(ROUTES, "Gateway", "shared", shared)
        rules = [selector_namespaces(item) for item in gateway["spec"]["listeners"]]
        return rules if all(rules) else None

    rules = await eventually(admitted, timeout=TIMEOUT, message="allowedRoutes on every listener")
    assert rules[0] == sorted([cluster.namespace, shared])
    await cluster.kube.delete(MDV, "ModelDeployment", "qwen", cluster.namespace)

    async def withdrawn() -> bool:
        gateway = await cluster.kube.get(ROUTES, "Gateway", "shared", shared)
        return not any(selector_namespaces(item) for item in gateway["spec"]["listeners"]) and await get_md(cluster) is None

    await eventually(withdrawn, timeout=TIMEOUT, message="allowedRoutes removed with the deployment")
    assert (await cluster.kube.get(ROUTES, "Gateway", "shared", shared))["spec"]["listeners"][1]["port"] == 443  # the rest intact


async def test_a_provider_managed_pool_in_another_namespace_is_waited_for_and_granted(
    wide_controller: Controller, cluster: Cluster
) -> None:
    """The gateway knows the pool as the watcher observed it: the watcher must watch the pool's namespace too."""
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http")], ready=["http"])
    await cluster.install(foreign_crd("nvidia.com", "v1alpha1", "DynamoGraphDeployment", "dynamographdeployments"))
    await cluster.kube.discover()
    pools = await cluster.other_namespace("pools")
    pool_name = f"{cluster.namespace}-qwen-pool"
    # the provider keeps its pools in one namespace, named after the deployment
    await eventually(lambda: get_obj(cluster, MDV, "InferenceProviderConfig", "dynamo"), timeout=TIMEOUT, message="dynamo registered")
    config = await cluster.kube.get(MDV, "InferenceProviderConfig", "dynamo")
    for engine in config["spec"]["capabilities"]["engines"]:
        engine["gateway"] = {
            "managesInferencePool": True,
            "inferencePoolNamePattern": "{namespace}-{name}-pool",
            "inferencePoolNamespace": pools,
        }
    await cluster.kube.patch(config, {"spec": config["spec"]})
    try:
        await cluster.kube.create(
            {**_md("qwen", cluster.namespace), "spec": {**_md("qwen", cluster.namespace)["spec"], "provider": {"name": "dynamo"}}}
        )
        dgd = await eventually(
            lambda: get_obj(cluster, "nvidia.com/v1alpha1", "DynamoGraphDeployment", "qwen"), timeout=TIMEOUT, message="DGD"
        )
        await cluster.kube.patch(dgd, {"status": {"state": "successful"}}, subresource="status")
        md = await wait_reason(cluster, "InferencePoolFailed")
        assert f"waiting for the provider's InferencePool {pools}/{pool_name}" in condition(md, "GatewayReady")["message"]
        assert await get_obj(cluster, POOL, "InferencePool", "qwen") is None  # the provider's to create, not Jetway's

        await cluster.kube.create(
            {
                "apiVersion": POOL,
                "kind": "InferencePool",
                "metadata": {"name": pool_name, "namespace": pools},
                "spec": {
                    "selector": {"matchLabels": {"app": "x"}},
                    "targetPorts": [{"number": 8000}],
                    "endpointPickerRef": {"name": "x-epp", "port": {"number": 9002}},  # required by upstream's CRD
                },
            }
        )
        await wait_reason(cluster, "GatewayConfigured")
        route = await cluster.kube.get(ROUTES, "HTTPRoute", "qwen", cluster.namespace)
        assert backends(route["spec"]["rules"][0]) == [
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool_name, "namespace": pools}
        ]
        grant = await cluster.kube.get("gateway.networking.k8s.io/v1beta1", "ReferenceGrant", f"{pool_name}-referencegrant", pools)
        assert grant["spec"]["from"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": cluster.namespace}]
        assert grant["spec"]["to"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool_name}]
    finally:
        if cluster.real:  # the config is cluster-scoped and outlives the test: the next workload service registers it afresh
            await cluster.kube.delete(MDV, "InferenceProviderConfig", "dynamo")


async def test_the_providers_pool_is_waited_for_and_used_as_the_watcher_sees_it(controller: Controller, cluster: Cluster) -> None:
    """Dynamo makes its own pool (`{name}-pool`): the gateway waits for it, then routes to it, deciding from what the
    watcher recorded of it, never reading it from the API server."""
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http")], ready=["http"])
    await cluster.install(foreign_crd("nvidia.com", "v1alpha1", "DynamoGraphDeployment", "dynamographdeployments"))
    await cluster.kube.discover()
    await eventually(lambda: get_obj(cluster, MDV, "InferenceProviderConfig", "dynamo"), timeout=TIMEOUT, message="dynamo registered")
    reads = pool_reads(cluster)
    manifest = _md("qwen", cluster.namespace)
    await cluster.kube.create({**manifest, "spec": {**manifest["spec"], "provider": {"name": "dynamo"}}})
    dgd = await eventually(lambda: get_obj(cluster, "nvidia.com/v1alpha1", "DynamoGraphDeployment", "qwen"), timeout=TIMEOUT, message="DGD")
    await cluster.kube.patch(dgd, {"status": {"state": "successful"}}, subresource="status")
    md = await wait_reason(cluster, "InferencePoolFailed")
    waiting = f"waiting for the provider's InferencePool {cluster.namespace}/qwen-pool: it does not exist yet"
    assert condition(md, "GatewayReady")["message"] == waiting
    assert await get_obj(cluster, ROUTES, "HTTPRoute", "qwen") is None  # nothing routes to a pool that is not there

    await cluster.kube.create(
        {
            "apiVersion": POOL,
            "kind": "InferencePool",
            "metadata": {"name": "qwen-pool", "namespace": cluster.namespace},  # Dynamo's, no label or owner of Jetway's
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "targetPorts": [{"number": 8000}],
                "endpointPickerRef": {"name": "x-epp", "port": {"number": 9002}},
            },
        }
    )
    md = await wait_reason(cluster, "GatewayConfigured")
    assert condition(md, "GatewayReady")["message"] == f"HTTPRoute to the provider's InferencePool {cluster.namespace}/qwen-pool created"
    route = await cluster.kube.get(ROUTES, "HTTPRoute", "qwen", cluster.namespace)
    assert backends(route["spec"]["rules"][0]) == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool"}]
    assert pool_reads(cluster) == reads


def pool_reads(cluster: Cluster) -> int | None:
    """InferencePools read one by one from the emulator (a real server's counts take in other tests' reads: None)."""
    return cluster.emulator.calls[("GET", "inferencepools", "")] if cluster.emulator is not None else None


def _md(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": MDV,
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}, "resources": {"gpu": {"count": 1}}},
    }


async def test_the_users_own_httproute_is_left_to_them(controller: Controller, cluster: Cluster) -> None:
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http")], ready=["http"])
    await running_md(cluster, **{"spec.gateway": {"httpRouteRef": "my-route"}})
    md = await wait_reason(cluster, "GatewayConfigured")
    assert "my-route" in condition(md, "GatewayReady")["message"]
    assert await get_obj(cluster, POOL, "InferencePool", "qwen") and await get_obj(cluster, ROUTES, "HTTPRoute", "qwen") is None


async def test_turning_the_gateway_off_removes_what_jetway_created(controller: Controller, cluster: Cluster) -> None:
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http")], ready=["http"])
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
    ("kind", "resource", "reason"),
    [("InferencePool", "inferencepools", "InferencePoolFailed"), ("HTTPRoute", "httproutes", "HTTPRouteFailed")],
)
async def test_a_write_that_fails_names_its_step(controller: Controller, cluster: Cluster, kind: str, resource: str, reason: str) -> None:
    await forbid(cluster, controller, resource, "patch")
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "inference", cluster.namespace, [listener("http")], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, reason)
    message = condition(md, "GatewayReady")["message"]
    assert f"{kind}/qwen: " in message and "forbidden" in message and md["status"]["phase"] == "Running"


async def test_a_gateway_that_cannot_be_patched_is_gateway_patch_failed(wide_controller: Controller, cluster: Cluster) -> None:
    shared = await cluster.other_namespace("gateway-system")
    await forbid(cluster, wide_controller, "gateways", "patch")
    await cluster.install_gateway_apis()
    await make_gateway(cluster, "shared", shared, [listener("http")], ready=["http"])
    await running_md(cluster)
    md = await wait_reason(cluster, "GatewayPatchFailed")
    message = condition(md, "GatewayReady")["message"]
    assert f"{shared}/shared" in message and "forbidden" in message


async def test_a_running_deployment_becomes_a_member_of_jetways_router(controller: Controller, cluster: Cluster) -> None:
    await running_md(cluster)
    service = await cluster.kube.get("v1", "Service", "qwen", cluster.namespace)
    if cluster.emulator is not None:  # the emulator allocates no cluster IP: the test does, as a real server would have
        service = await cluster.kube.patch(service, {"spec": {"clusterIP": "10.96.12.34"}})
    address = service["spec"]["clusterIP"]
    member = await eventually(
        lambda: get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}"),
        timeout=TIMEOUT,
        message="the router member",
    )
    spec = member["spec"]
    assert (spec["backend"], spec["url"], spec["models"]) == ("vllm-openai", f"http://{address}:8000", [{"name": "Qwen/Qwen3-0.6B"}])
    md = await get_md(cluster) or {}
    # cluster-scoped: an owner reference to a namespaced owner would be invalid (never collected), so the
    # owner is recorded by annotation and labels, and Jetway deletes the member itself
    assert not member["metadata"].get("ownerReferences")
    assert member["metadata"]["annotations"]["jetway.dev/owner-uid"] == md["metadata"]["uid"]
    assert member["metadata"]["labels"]["jetway.dev/model-deployment-namespace"] == cluster.namespace


async def test_same_named_deployments_in_two_namespaces_each_get_a_router_member(wide_controller: Controller, cluster: Cluster) -> None:
    """Members are cluster-scoped: each is named `<name>.<namespace>`, so a `qwen` in a second namespace gets
    a member of its own, and its withdrawal deletes only that one."""
    first = await running_md(cluster)
    await allocate_ip(cluster, "10.96.0.1")
    held = await eventually(lambda: member_of(cluster, first["metadata"]["uid"]), timeout=TIMEOUT, message="the first's member")
    second = dataclasses.replace(cluster, namespace=await cluster.other_namespace("second"))  # the same API, another namespace
    made = await running_md(second)
    await allocate_ip(second, "10.96.0.2")
    await eventually(lambda: member_of(second, made["metadata"]["uid"]), timeout=TIMEOUT, message="the second's own member")
    await second.kube.delete(MDV, "ModelDeployment", "qwen", second.namespace)
    await eventually(lambda: _absent_md(second), timeout=TIMEOUT, message="the second deployment withdrawn and gone")
    await eventually(lambda: _no_member(second), timeout=TIMEOUT, message="the second's member deleted with it")
    kept = await get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}")
    assert kept is not None and kept["metadata"]["uid"] == held["metadata"]["uid"]  # never deleted (and made again)


async def test_a_member_name_held_by_something_else_is_left_alone(
    controller: Controller, cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A member of that name that Jetway did not make (a user's own) is not written over."""
    theirs = {
        "apiVersion": "airdress.co/v1alpha1",
        "kind": "InferencePoolMember",
        "metadata": {"name": f"qwen.{cluster.namespace}"},
        "spec": {"backend": "echo", "models": [{"name": "mine"}]},
    }
    await cluster.kube.create(theirs)
    try:
        await running_md(cluster)
        await allocate_ip(cluster, "10.96.0.3")
        refused = f"ModelDeployment/{cluster.namespace}/qwen: no router member: resource"
        await eventually(lambda: refused in caplog.text, timeout=TIMEOUT, message="the held name refused")
        found = await get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}") or {}
        assert found["spec"]["backend"] == "echo" and found["spec"]["models"] == [{"name": "mine"}]
        await cluster.kube.delete(MDV, "ModelDeployment", "qwen", cluster.namespace)
        await eventually(lambda: _absent_md(cluster), timeout=TIMEOUT, message="withdrawn and gone")
        assert await get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}"), "not deleted"
    finally:
        await cluster.kube.delete("airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}")


async def _no_member(cluster: Cluster) -> bool:
    return await get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}") is None


async def allocate_ip(cluster: Cluster, address: str) -> None:
    """The model Service's cluster IP: a real server allocated one; on the emulator the test does."""
    if cluster.emulator is not None:
        service = await cluster.kube.get("v1", "Service", "qwen", cluster.namespace)
        await cluster.kube.patch(service, {"spec": {"clusterIP": address}})


async def member_of(cluster: Cluster, owner_uid: str) -> dict[str, Any] | None:
    """The router member of this namespace's `qwen`, once it is `owner_uid`'s."""
    found = await get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}")
    owner = ((found or {}).get("metadata", {}).get("annotations") or {}).get("jetway.dev/owner-uid")
    return found if found and owner == owner_uid else None


async def _absent_md(cluster: Cluster) -> bool:
    return await get_md(cluster) is None
