"""Helpers for tests of Jetway in Kubernetes mode: manifests, waiting on status, playing controllers."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator
from typing import Any

from contracts.events import Envelope
from contracts.subjects import Key
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.kube import Kube
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed

MDV = "airunway.ai/v1alpha1"
TIMEOUT = 30


def deployment_manifest(cluster: Cluster, name: str = "qwen", **changes: Any) -> dict[str, Any]:
    storage = {"spec.model.storage.volumes": [{"name": "cache", "purpose": "modelCache", "size": "20Gi"}]}
    return changed(
        MD, {"metadata.name": name, "metadata.namespace": cluster.namespace, "spec.provider": {"name": "vllm"}, **storage, **changes}
    )


async def get_md(cluster: Cluster, name: str = "qwen") -> dict[str, Any] | None:
    return await cluster.kube.get_or_none(MDV, "ModelDeployment", name, cluster.namespace)


async def get_obj(cluster: Cluster, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
    return await cluster.kube.get_or_none(api_version, kind, name, cluster.namespace)


async def phase_is(cluster: Cluster, phase: str, name: str = "qwen") -> dict[str, Any] | None:
    md = await get_md(cluster, name)
    return md if md and (md.get("status") or {}).get("phase") == phase else None


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


@contextlib.asynccontextmanager
async def phases_of(kube: Kube, namespace: str, name: str) -> AsyncIterator[list[str]]:
    """Every phase the ModelDeployment's status shows, in order, while the block runs."""
    seen: list[str] = []

    def note(obj: dict[str, Any]) -> None:
        phase = (obj.get("status") or {}).get("phase")
        if obj.get("metadata", {}).get("name") == name and phase and (not seen or seen[-1] != phase):
            seen.append(phase)

    # list, then watch from the list's version: a watch task that opens late misses nothing
    items, version = await kube.list(MDV, "ModelDeployment", namespace)
    for item in items:
        note(item)

    async def follow() -> None:
        async for _, obj in kube.watch(MDV, "ModelDeployment", version, namespace=namespace, timeout=120):
            note(obj)

    task = asyncio.create_task(follow())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def move_deployment(cluster: Cluster, name: str, ready: int, replicas: int = 1) -> None:
    """Report a Deployment's pods ready: on the emulator by writing the Deployment's status as its
    controller would; on a real server as the kubelet would, so the real Deployment controller does."""
    if cluster.real:
        await cluster.report_pods("Deployment", name, ready=ready)
        return
    obj = await cluster.kube.get("apps/v1", "Deployment", name, cluster.namespace)
    available = "True" if ready >= 1 else "False"
    await cluster.kube.patch(
        obj,
        {
            "status": {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "updatedReplicas": replicas,
                "conditions": [{"type": "Available", "status": available, "reason": "MinimumReplicas"}],
            }
        },
        subresource="status",
    )


async def history(nats_url: str, namespace: str, name: str) -> list[str]:
    nc = await connect(nats_url, name="read")
    try:
        items = await EventStore(nc, producer="t").read(Key("ModelDeployment", namespace, name).history_filter())
        return [f"{i.facet}:{i.type}" for i in items if isinstance(i, Envelope)]
    finally:
        await nc.close()


async def running_md(cluster: Cluster, name: str = "qwen", **changes: Any) -> dict[str, Any]:
    """A ModelDeployment that reached Running (the test plays the Deployment controller)."""
    await cluster.kube.create(deployment_manifest(cluster, name, **changes))
    await eventually(lambda: get_obj(cluster, "apps/v1", "Deployment", name), timeout=TIMEOUT, message=f"{name} Deployment")
    await move_deployment(cluster, name, ready=1)
    md: dict[str, Any] = await eventually(lambda: phase_is(cluster, "Running", name), timeout=TIMEOUT, message=f"{name} Running")
    return md


def listener(name: str, port: int = 80, protocol: str = "HTTP", hostname: str | None = None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "port": port, "protocol": protocol, **extra}
    if hostname:
        found["hostname"] = hostname
    return found


async def make_gateway(
    cluster: Cluster,
    name: str,
    namespace: str,
    listeners: list[dict[str, Any]],
    *,
    labels: dict[str, str] | None = None,
    addresses: list[str] | None = None,
    ready: list[str] | None = None,
) -> dict[str, Any]:
    """A Gateway, with the status its controller would publish: addresses, and which listeners are ready."""
    body = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"gatewayClassName": "test", "listeners": listeners},
    }
    created = await cluster.kube.create(body)
    return await publish_gateway(cluster, created, addresses=addresses, ready=ready)


async def publish_gateway(
    cluster: Cluster, gateway: dict[str, Any], *, addresses: list[str] | None = None, ready: list[str] | None = None
) -> dict[str, Any]:
    generation = gateway["metadata"].get("generation", 1)
    conditions = [
        {
            "type": t,
            "status": "True",
            "reason": t,
            "message": "",
            "observedGeneration": generation,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        for t in ("Accepted", "ResolvedRefs", "Programmed")
    ]
    status = {
        "addresses": [{"type": _address_type(a), "value": a} for a in addresses or []],
        "listeners": [
            {"name": n, "conditions": conditions, "attachedRoutes": 0, "supportedKinds": [{"kind": "HTTPRoute"}]} for n in ready or []
        ],
    }
    patched: dict[str, Any] = await cluster.kube.patch(gateway, {"status": status}, subresource="status")
    return patched


def _address_type(address: str) -> str:
    """How a Gateway controller types a published address (upstream's CRD refuses a hostname typed IPAddress)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "Hostname"
    return "IPAddress"
