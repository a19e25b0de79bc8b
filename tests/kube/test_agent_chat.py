"""End to end: a ModelDeployment whose pods are a real OpenAI-compatible server, routed by a Gateway
that is Jetway's own router, bound by an AgentDeployment whose resolved base URL answers a chat
completion through that router.

On a real server the Gateway API's CRDs are upstream's, the test plays the Gateway's controller
(its status subresource) and the kubelet (`report_pods`). The last hop, from the router to the
model's pods through the Service's cluster IP, is kube-proxy's work: the test control plane has
none (it would need the host's network stack), so there the test checks that the router is sent
to that cluster IP, and the chat completion runs on the emulator, where the test allocates the
Service a loopback address the model's server listens on."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import aiohttp

from testbed.controller import running_controller
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.support.kubecases import MDV, TIMEOUT, get_obj, listener, make_gateway, running_md
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI

MODEL = "Qwen/Qwen3-0.6B"


async def test_an_agent_bound_to_a_deployment_gets_answers_through_jetways_router(
    nats: NatsEndpoint, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.need_cluster_wide()  # Gateway API CRDs and an AgentProviderConfig: cluster-scoped
    # the model's pods: an OpenAI-compatible server on the port the rendered Service targets, on a loopback address of its own
    pod_ip = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    upstream = await FakeOpenAI(name="qwen-pod", models=[MODEL], host=pod_ip, port=8000).start()
    services = ("watcher", "selector", "storage", "workload", "gateway", "binding", "router")
    try:
        async with running_controller(nats.url, cluster, services=services, secrets=tmp_path) as controller:
            router_url = await controller.serve_router()
            router_port = int(router_url.rsplit(":", 1)[1])
            await cluster.install_gateway_apis()
            # the Gateway's data plane is Jetway's router: that is the address and port its controller publishes
            await make_gateway(
                cluster, "inference", cluster.namespace, [listener("http", router_port)], addresses=["127.0.0.1"], ready=["http"]
            )
            await cluster.kube.create(
                {
                    "apiVersion": MDV,
                    "kind": "AgentProviderConfig",
                    "metadata": {"name": "container"},
                    "spec": {"capabilities": {"backend": "container"}},
                }
            )
            await running_md(cluster)
            service = await cluster.kube.get("v1", "Service", "qwen", cluster.namespace)
            if cluster.emulator is not None:  # the emulator allocates no cluster IP: the test gives one that leads to the pod
                service = await cluster.kube.patch(service, {"spec": {"clusterIP": pod_ip}})
            member_url = f"http://{service['spec']['clusterIP']}:8000"

            async def member() -> dict[str, Any] | None:
                found = await get_obj(cluster, "airdress.co/v1alpha1", "InferencePoolMember", f"qwen.{cluster.namespace}")
                return found if found and found["spec"]["url"] == member_url else None

            await eventually(member, timeout=TIMEOUT, message="the router's member at the Service's cluster IP")

            await cluster.kube.create(
                {
                    "apiVersion": MDV,
                    "kind": "AgentDeployment",
                    "metadata": {"name": "helper", "namespace": cluster.namespace},
                    "spec": {
                        "framework": {"name": "container"},
                        "model": {"deploymentRef": {"name": "qwen"}},
                        "config": {"image": "ghcr.io/example/agent:1"},
                    },
                }
            )

            async def binding() -> dict[str, Any] | None:
                found = await cluster.kube.get(MDV, "AgentDeployment", "helper", cluster.namespace)
                bound = (found.get("status") or {}).get("modelBinding") or {}
                return bound if bound.get("baseURL") == f"http://127.0.0.1:{router_port}/v1" else None

            bound = await eventually(binding, timeout=TIMEOUT, message="the agent bound through the Gateway")
            assert bound["modelName"] == MODEL
            agent = await eventually(
                lambda: get_obj(cluster, "apps/v1", "Deployment", "helper"), timeout=TIMEOUT, message="agent Deployment"
            )
            env = {e["name"]: e.get("value") for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]}
            assert env["OPENAI_BASE_URL"] == bound["baseURL"] and env["OPENAI_MODEL"] == MODEL

            if cluster.real:
                return  # no kube-proxy: the cluster IP leads nowhere (see above)
            # what the agent would do: a chat completion at its base URL, with its model name
            async with aiohttp.ClientSession() as http:

                async def answered() -> dict[str, Any] | None:
                    request = {"model": env["OPENAI_MODEL"], "messages": [{"role": "user", "content": "hello"}]}
                    async with http.post(
                        f"{env['OPENAI_BASE_URL']}/chat/completions",
                        json=request,
                        headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"},
                    ) as answer:
                        return dict(await answer.json()) if answer.status == 200 else None

                reply = await eventually(answered, timeout=TIMEOUT, interval=0.2, message="a chat completion through the router")
            assert reply["choices"][0]["message"]["content"]
            assert [r.path for r in upstream.completions] and upstream.completions[-1].body["messages"][0]["content"] == "hello"
    finally:
        await upstream.stop()
        if cluster.real:  # cluster-scoped: it would outlive the test's namespace
            await cluster.kube.delete(MDV, "AgentProviderConfig", "container")
