"""Least privilege, proven on a real API server: each service runs as its own process in cluster mode
with a token of its own ServiceAccount from `deploy/` (a TokenRequest), never the admin credential,
and as its own NATS user (deploy/base/nats-auth.conf),
while a ModelDeployment, an AgentDeployment and the Gateway integration go through their lifecycle.

A verb missing from `deploy/base/rbac.yaml` shows up here as a 403 in a service's log or as a
lifecycle that never completes; a verb the roles must not grant shows up as a 403 the test expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.natsauth import PASSWORD_ENV, USER_ENV, new_password
from contracts.natsauth import SERVICES as NATS_USERS
from runtime.kube import Kube, KubeError
from runtime.natsserver import NatsServer, free_port
from testbed.cluster.thirdparty import gateway_api_crds
from testbed.kubeapi import Cluster, RealServer, cluster_for_tests
from testbed.waiting import eventually
from tests.kube.test_deploy_applied import KUBECTL
from tests.kube.test_processes import SERVICES, processes
from tests.support.cli import ROOT
from tests.support.kubecases import MDV, condition, deployment_manifest, get_md, get_obj, listener, make_gateway, move_deployment, phase_is

SYSTEM = "jetway-system"
RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"}
TIMEOUT = 60


@pytest.fixture
def secured_nats(tmp_path: Path) -> Iterator[tuple[NatsServer, dict[str, str]]]:
    """NATS as deploy/ runs it: the users of deploy/base/nats-auth.conf, each with a fresh password."""
    passwords = {s.user: new_password() for s in NATS_USERS}
    environ = {s.password_env: passwords[s.user] for s in NATS_USERS}
    auth = (ROOT / "deploy" / "base" / "nats-auth.conf").read_text()
    server = NatsServer(store_dir=tmp_path / "nats", authorization=auth, environ=environ).start()
    try:
        yield server, passwords
    finally:
        server.stop()


def rbac_of_deploy() -> list[dict[str, Any]]:
    """deploy/'s namespace, ServiceAccounts and roles, as `kubectl kustomize` builds them (no workloads: the
    services run here as processes, and no webhook configuration: nothing would serve the one deploy/ names)."""
    built = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "deploy")], capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(built.stdout) if d and d["kind"] in RBAC_KINDS]


async def token_for(kube: Kube, account: str) -> str:
    """A short-lived token of `account`, as the kubelet would mount it (TokenRequest)."""
    path = f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{account}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await kube.request("POST", path, body=body)
    token: str = answer["status"]["token"]
    return token


def kubeconfig_with(server: RealServer, token: str, path: Path) -> Path:
    """The admin kubeconfig's cluster (address and CA), with the ServiceAccount's token as the only user."""
    document = yaml.safe_load(Path(server.kubeconfig).read_text())
    cluster = document["clusters"][0]
    document["users"] = [{"name": "service", "user": {"token": token}}]
    document["contexts"] = [{"name": "service", "context": {"cluster": cluster["name"], "user": "service"}}]
    document["current-context"] = "service"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


@pytest.fixture
async def installed(real_server: RealServer) -> AsyncIterator[Cluster]:
    if not real_server.owned:
        pytest.skip("installs deploy/'s roles cluster-wide: runs on the test control plane, not on a shared cluster")
    async with cluster_for_tests(real_server) as cluster:
        await cluster.install_crds()
        for crd in gateway_api_crds():
            await cluster.install(crd)
        rbac = rbac_of_deploy()
        for obj in rbac:
            await cluster.kube.apply(obj, manager="jetway-install")
        try:
            yield cluster
        finally:
            for obj in reversed(rbac):
                with contextlib.suppress(KubeError):
                    await cluster.kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
            await eventually(lambda: _absent(cluster.kube, "v1", "Namespace", SYSTEM), timeout=120, message=f"namespace {SYSTEM} gone")


async def _absent(kube: Kube, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
    return await kube.get_or_none(api_version, kind, name, namespace) is None


async def test_each_service_with_its_own_service_account_takes_everything_through_its_lifecycle(
    installed: Cluster, secured_nats: tuple[NatsServer, dict[str, str]], tmp_path: Path
) -> None:
    """...and its own NATS user, with the rights deploy/base/nats-auth.conf gives it: a right missing
    there shows up as a "permissions violation" in a service's log or a lifecycle that never completes."""
    cluster = installed
    assert cluster.server is not None
    nats, passwords = secured_nats
    ports = {name: free_port() for name in SERVICES}
    per_service: dict[str, dict[str, str]] = {name: {USER_ENV: name, PASSWORD_ENV: passwords[name]} for name in SERVICES}
    per_service["router"]["JETWAY_SNAPSHOT_EVERY_EVENTS"] = "1"  # it folds only the one member and its health
    tokens: list[str] = []
    for name in SERVICES:
        if name in ("selector", "router"):  # their pods mount no token: they must run without any
            per_service[name]["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
            continue
        token = await token_for(cluster.kube, f"jetway-{name}")
        tokens.append(token)
        per_service[name]["KUBECONFIG"] = str(kubeconfig_with(cluster.server, token, tmp_path / f"{name}.kubeconfig"))
    env = {
        "JETWAY_MODE": "cluster",
        "JETWAY_NATS_URL": nats.url,
        "JETWAY_RESYNC_SECONDS": "2",
        "JETWAY_IMAGE_RESOLUTION": "off",  # no registry here: the default vLLM image is used by its tag
        "JETWAY_SNAPSHOT_EVERY_EVENTS": "5",  # every service stores snapshots of its projection, as its own NATS user
        "JETWAY_NAMESPACE": SYSTEM,
        "JETWAY_WEBHOOK_PORT": str(free_port()),
        "JETWAY_ROUTER_PORT": str(free_port()),
        "JETWAY_ROUTER_HOST": "127.0.0.1",
        "JETWAY_SECRETS_DIR": str(tmp_path / "secrets"),
    }
    framework = {
        "apiVersion": MDV,
        "kind": "AgentProviderConfig",
        "metadata": {
            "name": f"container-{cluster.namespace}",
            "annotations": {"airunway.ai/agent-catalog": '[{"name": "helper", "title": "Helper", "image": "ghcr.io/example/agent:1"}]'},
        },
        "spec": {"capabilities": {"backend": "container"}},
    }

    def alive() -> None:
        for name, process in running.items():
            assert process.poll() is None, f"{name} exited: " + (tmp_path / f"{name}.log").read_text()[-3000:]

    async def waited(check: Any, message: str) -> Any:
        async def probe() -> Any:
            alive()
            return await check()

        try:
            return await eventually(probe, timeout=TIMEOUT, interval=0.2, message=message)
        except AssertionError as stuck:  # say which verb was refused, if one was
            refused = [line for name in SERVICES for line in (tmp_path / f"{name}.log").read_text().splitlines() if "Forbidden" in line]
            raise AssertionError(f"{stuck}; refused: {refused[:5]}") from None

    with processes(env, ports, tmp_path, per_service=per_service) as running:
        try:
            # the Gateway a platform team runs, with the status its controller publishes
            namespace = cluster.namespace
            await make_gateway(cluster, "inference", namespace, [listener("http", 80)], addresses=["203.0.113.7"], ready=["http"])

            # a ModelDeployment: storage (PVC), workload (Deployment, Service), then Running once its pod is ready
            await cluster.kube.create(deployment_manifest(cluster))
            await waited(lambda: get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-cache"), "the model cache PVC")
            await waited(lambda: get_obj(cluster, "apps/v1", "Deployment", "qwen"), "the model's Deployment")
            await move_deployment(cluster, "qwen", ready=1)
            await waited(lambda: phase_is(cluster, "Running"), "qwen Running")

            # the Gateway integration: InferencePool, HTTPRoute and the endpoint picker with its Role
            async def routed() -> dict[str, Any] | None:
                md = await get_md(cluster)
                return md if md and condition(md, "GatewayReady").get("reason") == "GatewayConfigured" else None

            await waited(routed, "GatewayReady GatewayConfigured")
            assert await get_obj(cluster, "inference.networking.k8s.io/v1", "InferencePool", "qwen")
            assert await get_obj(cluster, "gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
            assert await get_obj(cluster, "rbac.authorization.k8s.io/v1", "RoleBinding", "qwen-epp")

            # an AgentDeployment bound to it: its Deployment, Service and phase
            await cluster.kube.create(framework)
            agent = {
                "apiVersion": MDV,
                "kind": "AgentDeployment",
                "metadata": {"name": "helper", "namespace": namespace},
                "spec": {
                    "framework": {"name": framework["metadata"]["name"]},
                    "model": {"deploymentRef": {"name": "qwen"}},
                },
            }
            await cluster.kube.create(agent)
            await waited(lambda: get_obj(cluster, "apps/v1", "Deployment", "helper"), "the agent's Deployment")
            await move_deployment(cluster, "helper", ready=1)

            async def agent_running() -> bool:
                found = await cluster.kube.get_or_none(MDV, "AgentDeployment", "helper", namespace)
                return bool(found and (found.get("status") or {}).get("phase") == "Running")

            await waited(agent_running, "helper Running")
            bound = (await cluster.kube.get(MDV, "AgentDeployment", "helper", namespace))["status"]["modelBinding"]
            assert bound["baseURL"] == "http://203.0.113.7:80/v1"  # a routed model is reached through its Gateway

            # and back: the watcher's finalizer goes once the services withdrew what they wrote
            await cluster.kube.delete(MDV, "AgentDeployment", "helper", namespace)
            await cluster.kube.delete(MDV, "ModelDeployment", "qwen", namespace)
            await waited(lambda: _absent(cluster.kube, MDV, "ModelDeployment", "qwen", namespace), "qwen deleted, finalizer released")
            await waited(lambda: _absent(cluster.kube, "inference.networking.k8s.io/v1", "InferencePool", "qwen", namespace), "pool gone")
        finally:
            with contextlib.suppress(KubeError):
                await cluster.kube.delete(MDV, "AgentProviderConfig", framework["metadata"]["name"])
            for process in running.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            codes = {name: await asyncio.to_thread(process.wait, 15) for name, process in running.items()}
    assert codes == dict.fromkeys(SERVICES, 0)
    for name in SERVICES:
        text = (tmp_path / f"{name}.log").read_text()
        # a refusal is logged as KubeError's "403 Forbidden: ..." (a bare " 403" also matched a snapshot's "bytes": 4030)
        assert "Forbidden" not in text and not re.search(r'"status": 403\b', text), (
            f"{name} was refused a verb deploy/ should grant: {text[-3000:]}"
        )
        assert "Traceback" not in text, text[-3000:]
        assert not any(token in text for token in tokens), f"a ServiceAccount token reached {name}'s log"
        assert "permissions violation" not in text.lower(), f"{name} was refused a NATS right nats-auth.conf should give: {text[-3000:]}"
        assert "snapshot stored" in text and "snapshot not stored" not in text, f"{name} could not store its snapshot: {text[-3000:]}"
        assert not any(password in text for password in passwords.values()), f"a NATS password reached {name}'s log"


async def test_a_service_cannot_do_what_its_role_does_not_allow(installed: Cluster, tmp_path: Path) -> None:
    cluster = installed
    assert cluster.server is not None
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token", "namespace": cluster.namespace},
        "stringData": {"t": "x"},
    }
    await cluster.kube.create(secret)

    async def as_account(account: str) -> Kube:
        token = await token_for(cluster.kube, account)
        kube = await Kube.connect(str(kubeconfig_with(cluster.server, token, tmp_path / f"{account}.kubeconfig")))
        return kube

    refusals = [
        ("jetway-selector", lambda k: k.get("v1", "Secret", "hf-token", cluster.namespace)),  # NATS only: it reads nothing
        ("jetway-watcher", lambda k: k.get("v1", "Secret", "hf-token", cluster.namespace)),  # only its own webhook Secret
        ("jetway-watcher", lambda k: k.create(_deployment(cluster.namespace))),  # it reports, it writes no workload
        ("jetway-storage", lambda k: k.create(_deployment(cluster.namespace))),
        ("jetway-workload", lambda k: k.get("v1", "Secret", "hf-token", cluster.namespace)),
    ]
    for account, attempt in refusals:
        kube = await as_account(account)
        try:
            with pytest.raises(KubeError) as refused:
                await attempt(kube)
            assert refused.value.status == 403, f"{account}: {refused.value}"
            assert f"system:serviceaccount:{SYSTEM}:{account}" in str(refused.value)
        finally:
            await kube.close()
    # and what the role does allow works with the same kind of token
    workload = await as_account("jetway-workload")
    try:
        created = await workload.create(_deployment(cluster.namespace))
        assert created["metadata"]["uid"]
    finally:
        await workload.close()


def _deployment(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    }
