"""The binding service on the emulator and on a real API server: agent frameworks' readiness, each
binding mode's rules, and the agent workloads it writes.

On a real server the test plays what is missing there as that component would: the kubelet
(`report_pods`; the real Deployment and Job controllers move the status), the Gateway's and
kagent's controllers (their objects' status subresource). AgentProviderConfigs are cluster-scoped:
each test labels the ones it makes and removes them after it, so tests sharing the session's
server do not see each other's frameworks."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from runtime.kube import KubeError
from testbed.cluster import thirdparty
from testbed.controller import Controller, running_controller
from testbed.kubeapi import CRD_API, CRDS, Cluster, foreign_crd, gateway_api_crds
from testbed.waiting import eventually
from tests.support.kubecases import (
    MDV,
    TIMEOUT,
    condition,
    get_obj,
    listener,
    make_gateway,
    move_deployment,
    publish_gateway,
    running_md,
)
from tests.support.nats import NatsEndpoint

INSTRUCTIONS = "Install the Kagent operator before deploying agents with this framework."
KAGENT_CRDS = [  # stand-ins: kagent publishes no Go module to take its CRDs from (testbed/cluster/thirdparty.py)
    foreign_crd("kagent.dev", "v1alpha2", "Agent", "agents"),
    foreign_crd("kagent.dev", "v1alpha2", "ModelConfig", "modelconfigs"),
]
MADE_BY = "jetway.test/namespace"  # on the cluster-scoped objects a test makes: which test's they are
AGENT_CRD = "agentdeployments.airunway.ai"
MEMBER_API = "airdress.co/v1alpha1"


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    cluster.need_cluster_wide()  # AgentProviderConfigs (and CRDs) are cluster-scoped: not on a shared cluster
    models: set[str] = set()
    async with running_controller(nats.url, cluster) as running:
        try:
            yield running
        finally:
            made, _ = await cluster.kube.list(MDV, "ModelDeployment", cluster.namespace)
            models = {m["metadata"]["uid"] for m in made}
            await remove_frameworks(cluster)
    await remove_router_members(cluster, models)


def framework(cluster: Cluster, name: str = "container", **capabilities: Any) -> dict[str, Any]:
    caps = {"backend": "container", **capabilities}
    annotations = {"airunway.ai/install-instructions": INSTRUCTIONS}
    if caps["backend"] == "container":
        annotations["airunway.ai/agent-catalog"] = '[{"name": "helper", "title": "Helper", "image": "ghcr.io/example/agent:1"}]'
    return {
        "apiVersion": MDV,
        "kind": "AgentProviderConfig",
        "metadata": {"name": name, "annotations": annotations, "labels": {MADE_BY: cluster.namespace}},
        "spec": {"capabilities": caps},
    }


async def remove_frameworks(cluster: Cluster) -> None:
    """Delete the AgentProviderConfigs this test made (they outlive its namespace)."""
    selector = f"{MADE_BY}={cluster.namespace}"
    made, _ = await cluster.kube.list(MDV, "AgentProviderConfig", label_selector=selector)
    for item in made:
        await cluster.kube.delete(MDV, "AgentProviderConfig", item["metadata"]["name"])

    async def gone() -> bool:
        left, _ = await cluster.kube.list(MDV, "AgentProviderConfig", label_selector=selector)
        return not left

    await eventually(gone, timeout=TIMEOUT, message="the test's AgentProviderConfigs removed")


async def remove_router_members(cluster: Cluster, models: set[str]) -> None:
    """Delete the router members (cluster-scoped InferencePoolMembers) the test's ModelDeployments left. A
    real garbage collector never removes a cluster-scoped object for a namespaced owner, and a member the
    gateway service writes while its deployment is being deleted outlives it."""
    members, _ = await cluster.kube.list(MEMBER_API, "InferencePoolMember")
    for member in members:
        if any(o.get("uid") in models for o in member["metadata"].get("ownerReferences") or []):
            await cluster.kube.delete(MEMBER_API, "InferencePoolMember", member["metadata"]["name"])


def agent(cluster: Cluster, name: str = "helper", framework_name: str = "container", **model: Any) -> dict[str, Any]:
    return {
        "apiVersion": MDV,
        "kind": "AgentDeployment",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {"framework": {"name": framework_name}, "model": model or {"deploymentRef": {"name": "qwen"}}},
    }


def service_url(cluster: Cluster, service: str, port: int = 8000) -> str:
    return f"http://{service}.{cluster.namespace}.svc.cluster.local:{port}/v1"


async def status_of(cluster: Cluster, kind: str, name: str) -> dict[str, Any]:
    found = await cluster.kube.get_or_none(MDV, kind, name, cluster.namespace if kind != "AgentProviderConfig" else None)
    return (found or {}).get("status") or {}


async def wait_condition(cluster: Cluster, kind: str, name: str, type_: str, reason: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = await cluster.kube.get_or_none(MDV, kind, name, cluster.namespace if kind != "AgentProviderConfig" else None)
        return found if found and condition(found, type_).get("reason") == reason else None

    result: dict[str, Any] = await eventually(check, timeout=TIMEOUT, message=f"{kind}/{name} {type_}={reason}")
    return result


async def bound_url(cluster: Cluster, name: str = "helper", expected: str | None = None) -> str:
    async def check() -> str | None:
        binding = (await status_of(cluster, "AgentDeployment", name)).get("modelBinding") or {}
        url = binding.get("baseURL")
        return url if url and (expected is None or url == expected) else None

    url: str = await eventually(check, timeout=TIMEOUT, message=f"bound to {expected or 'anything'}")
    return url


# --- frameworks ---------------------------------------------------------------------------------


async def test_framework_readiness_and_install_instructions(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    found = await wait_condition(cluster, "AgentProviderConfig", "container", "Ready", "ContainerBackend")
    assert found["status"]["ready"] is True and condition(found, "Ready")["status"] == "True"

    await cluster.kube.create(framework(cluster, "orka", backend="crd", requiresOperator=True))
    found = await wait_condition(cluster, "AgentProviderConfig", "orka", "Ready", "OperatorAPIGroupMissing")
    assert found["status"]["ready"] is False and condition(found, "Ready")["message"].endswith(INSTRUCTIONS)

    await cluster.kube.create(framework(cluster, "kagent", backend="crd", requiresOperator=True, operatorAPIGroup="kagent.dev/v1alpha2"))
    found = await wait_condition(cluster, "AgentProviderConfig", "kagent", "Ready", "OperatorNotInstalled")
    message = condition(found, "Ready")["message"]
    assert "kagent.dev/v1alpha2 is not served" in message and message.endswith(INSTRUCTIONS)
    # an agent of a framework that is not ready says so, instructions included
    await cluster.kube.create(
        agent(cluster, "sre", "kagent", externalAPI={"type": "openai", "baseURL": "https://api.example.com/v1", "modelName": "m"})
    )
    sre = await wait_condition(cluster, "AgentDeployment", "sre", "FrameworkReady", "OperatorNotInstalled")
    assert condition(sre, "FrameworkReady")["message"].endswith(INSTRUCTIONS)
    await eventually(lambda: _phase(cluster, "sre", "Pending"), timeout=TIMEOUT, message="sre Pending")

    for crd in KAGENT_CRDS:  # the operator is installed
        await cluster.install(crd)
    await wait_condition(cluster, "AgentProviderConfig", "kagent", "Ready", "OperatorInstalled")
    sre = await wait_condition(cluster, "AgentDeployment", "sre", "FrameworkReady", "FrameworkReady")
    assert condition(sre, "ModelBound")["status"] == "True"


# --- deploymentRef ------------------------------------------------------------------------------


async def test_deployment_ref_without_a_gateway_binds_to_the_model_service(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    await running_md(cluster)
    await cluster.kube.create(agent(cluster))
    url = await bound_url(cluster)
    assert url == service_url(cluster, "qwen")
    binding = (await status_of(cluster, "AgentDeployment", "helper"))["modelBinding"]
    assert binding["bindingMode"] == "deploymentRef" and binding["apiType"] == "openai" and binding["modelName"] == "Qwen/Qwen3-0.6B"
    assert "credentialsRef" not in binding  # keyless in-cluster


async def gateway_setup(
    cluster: Cluster, listeners: list[dict[str, Any]], *, addresses: list[str] | None = None, ready: list[str] | None = None
) -> dict[str, Any]:
    # a real server gets the Gateway API's own CRDs, so their schemas and rules judge what the test and Jetway write
    for crd in thirdparty.gateway_api_crds() if cluster.real else gateway_api_crds():
        await cluster.install(crd)
    await cluster.kube.discover()
    return await make_gateway(cluster, "inference", cluster.namespace, listeners, addresses=addresses, ready=ready)


async def test_deployment_ref_through_the_gateway_recovers_when_the_address_comes_late(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    gateway = await gateway_setup(cluster, [listener("http", 8080)], ready=["http"])  # no address published yet
    await running_md(cluster, **{"spec.model.servedName": "qwen-small"})
    await cluster.kube.create(agent(cluster))
    assert await bound_url(cluster) == service_url(cluster, "qwen")  # no address: the model Service
    await publish_gateway(
        cluster,
        await cluster.kube.get("gateway.networking.k8s.io/v1", "Gateway", "inference", cluster.namespace),
        addresses=["203.0.113.9"],
        ready=["http"],
    )
    assert await bound_url(cluster, expected="http://203.0.113.9:8080/v1")
    binding = (await status_of(cluster, "AgentDeployment", "helper"))["modelBinding"]
    assert binding["modelName"] == "qwen-small"  # status.gateway.modelName
    assert gateway["metadata"]["name"] == "inference"


async def test_deployment_ref_with_several_ready_listeners_keeps_the_published_endpoint(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    await gateway_setup(cluster, [listener("a", 80), listener("b", 8080)], addresses=["203.0.113.5"], ready=["a", "b"])
    await running_md(cluster)
    await cluster.kube.create(agent(cluster))
    assert await bound_url(cluster, expected="http://203.0.113.5/v1")  # status.gateway.endpoint, normalized


async def test_deployment_ref_with_no_ready_listener_falls_back_to_the_service(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    await gateway_setup(cluster, [listener("a", 80), listener("b", 8080)], addresses=["203.0.113.5"], ready=[])
    await running_md(cluster)
    await cluster.kube.create(agent(cluster))
    assert await bound_url(cluster) == service_url(cluster, "qwen")


async def test_deployment_ref_to_another_namespace_or_a_missing_model(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    await cluster.kube.create(agent(cluster, "far", deploymentRef={"name": "qwen", "namespace": "other"}))
    await wait_condition(cluster, "AgentDeployment", "far", "ModelBound", "CrossNamespaceRefNotAllowed")
    await eventually(lambda: _phase(cluster, "far", "Failed"), timeout=TIMEOUT, message="far Failed")
    await cluster.kube.create(agent(cluster, "early"))
    await wait_condition(cluster, "AgentDeployment", "early", "ModelBound", "ModelDeploymentNotFound")
    await eventually(lambda: _phase(cluster, "early", "Pending"), timeout=TIMEOUT, message="early Pending")
    await running_md(cluster)
    await wait_condition(cluster, "AgentDeployment", "early", "ModelBound", "ModelBound")


# --- gatewayEndpoint ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listeners", "ready", "listener_name", "expected"),
    [
        ([listener("http", 8080)], ["http"], None, "http://203.0.113.7:8080/v1"),
        ([listener("web", 443, "HTTPS", hostname="models.example.com")], ["web"], None, "https://models.example.com:443/v1"),
        ([listener("a", 80), listener("b", 8443, "HTTPS")], ["a", "b"], "b", "https://203.0.113.7:8443/v1"),
        ([listener("a", 80), listener("b", 8443, "HTTPS")], ["a", "b"], None, "ListenerNameRequired"),
        ([listener("http", 80)], [], None, "ListenerNotReady"),
        ([listener("web", 443, "HTTPS", hostname="*.example.com")], ["web"], None, "WildcardListenerHostname"),
        ([listener("tcp", 9000, "TCP")], ["tcp"], None, "NoCompatibleListener"),
        ([listener("http", 80)], ["http"], "nope", "ListenerNotFound"),
    ],
    ids=["one-listener", "hostname-authority", "named-listener", "name-required", "not-ready", "wildcard", "no-http", "unknown-name"],
)
async def test_gateway_endpoint_listener_rules(
    controller: Controller, cluster: Cluster, listeners: list[dict[str, Any]], ready: list[str], listener_name: str | None, expected: str
) -> None:
    await cluster.kube.create(framework(cluster))
    await gateway_setup(cluster, listeners, addresses=["203.0.113.7"], ready=ready)
    ref: dict[str, Any] = {"name": "inference", **({"listenerName": listener_name} if listener_name else {})}
    await cluster.kube.create(agent(cluster, gatewayEndpoint={"gatewayRef": ref, "modelName": "llama"}))
    if expected.startswith("http"):
        assert await bound_url(cluster) == expected
        assert (await status_of(cluster, "AgentDeployment", "helper"))["modelBinding"]["modelName"] == "llama"
    else:
        found = await wait_condition(cluster, "AgentDeployment", "helper", "ModelBound", expected)
        assert "modelBinding" not in found["status"]


async def test_gateway_endpoint_without_an_address_waits_for_one(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    gateway = await gateway_setup(cluster, [listener("http", 80)], ready=["http"])
    await cluster.kube.create(agent(cluster, gatewayEndpoint={"gatewayRef": {"name": "inference"}, "modelName": "llama"}))
    await wait_condition(cluster, "AgentDeployment", "helper", "ModelBound", "GatewayAddressPending")
    await eventually(lambda: _phase(cluster, "helper", "Pending"), timeout=TIMEOUT, message="helper Pending")
    await publish_gateway(cluster, gateway, addresses=["gw.example.net"], ready=["http"])
    assert await bound_url(cluster) == "http://gw.example.net:80/v1"


# --- externalAPI --------------------------------------------------------------------------------


async def test_external_api_binds_with_its_credentials_and_a_bad_url_is_refused_at_reconcile(
    controller: Controller, cluster: Cluster
) -> None:
    await cluster.kube.create(framework(cluster))
    external = {
        "type": "anthropic",
        "baseURL": "https://api.anthropic.com",
        "modelName": "claude",
        "credentialsRef": {"name": "keys", "key": "k"},
    }
    await cluster.kube.create(agent(cluster, externalAPI=external))
    assert await bound_url(cluster) == "https://api.anthropic.com"
    binding = (await status_of(cluster, "AgentDeployment", "helper"))["modelBinding"]
    assert binding["apiType"] == "anthropic" and binding["credentialsRef"] == {"name": "keys", "key": "k"}
    deployment = await eventually(lambda: get_obj(cluster, "apps/v1", "Deployment", "helper"), timeout=TIMEOUT, message="agent Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ANTHROPIC_BASE_URL"]["value"] == "https://api.anthropic.com"
    assert env["ANTHROPIC_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "keys", "key": "k"}}

    # stored while neither the webhook nor today's CRD rules checked it: caught when Jetway reconciles it, nothing bound or written
    bad = {"userinfo": "https://user:pw@api.example.com", "badport": "https://api.example.com:70000", "ftp": "ftp://x.example"}
    await store_before_the_url_rule(
        cluster, [agent(cluster, name, externalAPI={"type": "openai", "baseURL": url, "modelName": "m"}) for name, url in bad.items()]
    )
    for name in bad:
        refused = await wait_condition(cluster, "AgentDeployment", name, "Validated", "ValidationFailed")
        assert "spec.model.externalAPI.baseURL" in condition(refused, "Validated")["message"]
        await eventually(lambda n=name: _phase(cluster, n, "Failed"), timeout=TIMEOUT, message=f"{name} Failed")
        assert await get_obj(cluster, "apps/v1", "Deployment", name) is None
        assert "pw" not in str(refused["status"])  # the credentials in the URL are not repeated back


# --- workloads ----------------------------------------------------------------------------------


async def test_a_container_agent_runs_locked_down_and_reports_running(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(framework(cluster))
    await running_md(cluster)
    manifest = agent(cluster)
    manifest["spec"]["provider"] = {"overrides": {"container": {"securityContext": {"runAsUser": 1000}}}}
    await cluster.kube.create(manifest)
    deployment = await eventually(lambda: get_obj(cluster, "apps/v1", "Deployment", "helper"), timeout=TIMEOUT, message="agent Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["OPENAI_BASE_URL"] == service_url(cluster, "qwen") and env["OPENAI_API_KEY"] == "not-required"
    assert env["OPENAI_MODEL"] == "Qwen/Qwen3-0.6B" and container["image"] == "ghcr.io/example/agent:1"
    security = container["securityContext"]
    assert security == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 1000,
    }
    assert pod["securityContext"]["runAsNonRoot"] is True
    # the Service and the phase are written after the Deployment: waited for, never read once
    await eventually(lambda: get_obj(cluster, "v1", "Service", "helper"), timeout=TIMEOUT, message="agent Service")
    await eventually(lambda: _phase(cluster, "helper", "Deploying"), timeout=TIMEOUT, message="helper Deploying")
    status = await status_of(cluster, "AgentDeployment", "helper")
    assert status["runtime"]["address"] == f"http://helper.{cluster.namespace}.svc.cluster.local"
    await move_deployment(cluster, "helper", ready=1)  # the kubelet reports the pod ready (the emulator: the Deployment controller)
    found = await wait_condition(cluster, "AgentDeployment", "helper", "Ready", "WorkloadReady")
    assert found["status"]["replicas"]["available"] == 1
    await eventually(lambda: _phase(cluster, "helper", "Running"), timeout=TIMEOUT, message="helper Running")


async def test_a_job_agent_and_a_kagent_agent(controller: Controller, cluster: Cluster) -> None:
    for crd in KAGENT_CRDS:
        await cluster.install(crd)
    await cluster.kube.create(framework(cluster))
    await cluster.kube.create(framework(cluster, "kagent", backend="crd", requiresOperator=True, operatorAPIGroup="kagent.dev"))
    await running_md(cluster)
    job = agent(cluster, "batch")
    job["spec"]["lifecycle"] = "job"
    await cluster.kube.create(job)
    found = await eventually(lambda: get_obj(cluster, "batch/v1", "Job", "batch"), timeout=TIMEOUT, message="agent Job")
    assert found["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert await get_obj(cluster, "apps/v1", "Deployment", "batch") is None
    await finish_job(cluster, "batch")
    await wait_condition(cluster, "AgentDeployment", "batch", "Ready", "JobCompleted")
    await eventually(lambda: _phase(cluster, "batch", "Completed"), timeout=TIMEOUT, message="batch Completed")

    await cluster.kube.create(agent(cluster, "sre", "kagent"))
    model = await eventually(
        lambda: get_obj(cluster, "kagent.dev/v1alpha2", "ModelConfig", "sre-model"), timeout=TIMEOUT, message="ModelConfig"
    )
    assert model["spec"]["openAI"] == {"baseUrl": service_url(cluster, "qwen")}
    assert (model["spec"]["apiKeySecret"], model["spec"]["apiKeySecretKey"]) == ("sre-model-noauth", "token")
    secret = await cluster.kube.get("v1", "Secret", "sre-model-noauth", cluster.namespace)
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "AgentDeployment"
    crd_agent = await cluster.kube.get("kagent.dev/v1alpha2", "Agent", "sre", cluster.namespace)
    assert crd_agent["spec"]["declarative"]["modelConfig"] == "sre-model"
    binding = await eventually(
        lambda: _binding(cluster, "sre"), timeout=TIMEOUT, message="sre's binding reported"
    )  # written after the objects: waited for, not read once
    assert "credentialsRef" not in binding  # core leaves it empty
    await cluster.kube.patch(crd_agent, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, subresource="status")
    await wait_condition(cluster, "AgentDeployment", "sre", "Ready", "AgentReady")
    await eventually(lambda: _phase(cluster, "sre", "Running"), timeout=TIMEOUT, message="sre Running")


async def finish_job(cluster: Cluster, name: str) -> None:
    """The Job's pod succeeds: on a real server the kubelet's report (the real Job controller completes the
    Job); on the emulator the status the Job controller would write."""
    if cluster.real:
        await cluster.report_pods("Job", name, succeeded=True)
        return
    job = await cluster.kube.get("batch/v1", "Job", name, cluster.namespace)
    done = {"succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}
    await cluster.kube.patch(job, {"status": done}, subresource="status")


async def _binding(cluster: Cluster, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (await status_of(cluster, "AgentDeployment", name)).get("modelBinding")
    return found


async def _phase(cluster: Cluster, name: str, phase: str) -> bool:
    return bool((await status_of(cluster, "AgentDeployment", name)).get("phase") == phase)


async def store_before_the_url_rule(cluster: Cluster, manifests: list[dict[str, Any]]) -> None:
    """Store AgentDeployments today's CRD rule on externalAPI.baseURL refuses, as objects admitted before
    the rule existed (with no webhook) are. The emulator stores them unchecked; a real server would
    refuse them, so the rule is taken out of its CRD for these writes and put back after, which is how
    such objects come to exist."""
    if cluster.emulator is not None:
        for manifest in manifests:
            cluster.emulator.store_unchecked(manifest)
        return
    crd = await cluster.kube.get(CRD_API, "CustomResourceDefinition", AGENT_CRD)
    versions = copy.deepcopy(crd["spec"]["versions"])
    for version in versions:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["model"]["properties"]["externalAPI"]["properties"]["baseURL"].pop("x-kubernetes-validations")
    await cluster.kube.patch(crd, {"spec": {"versions": versions}})  # a merge patch replaces the list: the rule is gone
    try:
        for manifest in manifests:  # the server takes a CRD's new schema up on its own time: retried until it has
            await eventually(lambda m=manifest: _created(cluster, m), timeout=TIMEOUT, message=f"{manifest['metadata']['name']} stored")
    finally:
        await cluster.kube.apply(yaml.safe_load((CRDS / f"{AGENT_CRD}.yaml").read_text()), manager="jetway-tests")
        probe = agent(cluster, "probe", externalAPI={"type": "openai", "baseURL": "ftp://x.example", "modelName": "m"})
        await eventually(lambda: _refused(cluster, probe), timeout=TIMEOUT, message="the baseURL rule back in force")


async def _created(cluster: Cluster, manifest: dict[str, Any]) -> bool:
    try:
        await cluster.kube.create(manifest)
    except KubeError as exc:
        if exc.status == 422:  # Invalid: the server still judges by the rule
            return False
        raise
    return True


async def _refused(cluster: Cluster, manifest: dict[str, Any]) -> bool:
    """Whether the server refuses `manifest` as Invalid (a dry run: nothing is stored either way)."""
    resource = await cluster.kube.served(MDV, "AgentDeployment")
    try:
        await cluster.kube.request("POST", resource.path(cluster.namespace), query=[("dryRun", "All")], body=manifest)
    except KubeError as exc:
        return exc.status == 422
    return False
