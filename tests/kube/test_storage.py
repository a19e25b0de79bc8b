"""A ModelDeployment's storage against a cluster: the pre-existing claims its volumes mount, and a claim
name that is taken by an object Jetway does not own. The real services on real NATS, against the API
emulator and a real API server; the test plays the PersistentVolume binder (neither has one running)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from testbed.controller import Controller, running_controller
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.support.kubecases import TIMEOUT, condition, deployment_manifest, get_md, get_obj
from tests.support.nats import NatsEndpoint

VOLUMES = "spec.model.storage.volumes"


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    async with running_controller(nats.url, cluster) as running:
        yield running


def claim(cluster: Cluster, name: str) -> dict[str, Any]:
    """A claim made by hand (no Jetway labels, no owner), as a user or another tool makes one."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": {"team": "models"}},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}},
    }


async def set_phase(cluster: Cluster, name: str, phase: str) -> None:
    """Be the PersistentVolume binder: report the claim's phase through its status subresource."""
    found = await cluster.kube.get("v1", "PersistentVolumeClaim", name, cluster.namespace)
    await cluster.kube.patch(found, {"status": {"phase": phase}}, subresource="status")


async def storage_is(cluster: Cluster, status: str, reason: str, words: str = "", *, failed: bool | None = None) -> dict[str, Any] | None:
    """The ModelDeployment once its StorageReady says so (and, `failed` given, its phase is Failed or not: the
    composed phase is written apart from the storage service's conditions, so it may follow a moment later)."""
    md = await get_md(cluster)
    ready = condition(md or {}, "StorageReady")
    if (ready.get("status"), ready.get("reason")) != (status, reason) or words not in ready.get("message", ""):
        return None
    return md if failed is None or ((md or {}).get("status", {}).get("phase") == "Failed") is failed else None


async def test_a_pre_existing_claim_is_waited_on_until_bound_and_fails_when_missing_or_lost(
    controller: Controller, cluster: Cluster
) -> None:
    shared = [{"name": "cache", "purpose": "modelCache", "claimName": "shared-models", "readOnly": True}]
    await cluster.kube.create(deployment_manifest(cluster, **{VOLUMES: shared}))

    md = await eventually(lambda: storage_is(cluster, "False", "PVCFailed", "not found", failed=True), timeout=TIMEOUT, message="missing")
    assert '"shared-models"' in condition(md, "StorageReady")["message"]

    await cluster.kube.create(claim(cluster, "shared-models"))  # Pending: no volume bound to it yet
    await eventually(lambda: storage_is(cluster, "False", "PVCsPending", "to be bound", failed=False), timeout=TIMEOUT, message="waiting")

    await set_phase(cluster, "shared-models", "Bound")
    await eventually(lambda: storage_is(cluster, "True", "PVCsBound"), timeout=TIMEOUT, message="ready once Bound")

    await set_phase(cluster, "shared-models", "Lost")  # its volume went away
    await eventually(lambda: storage_is(cluster, "False", "PVCFailed", "Lost phase", failed=True), timeout=TIMEOUT, message="Lost")
    left = await cluster.kube.get("v1", "PersistentVolumeClaim", "shared-models", cluster.namespace)
    assert not left["metadata"].get("ownerReferences") and left["metadata"]["labels"] == {"team": "models"}  # never Jetway's


async def test_a_claim_name_taken_by_an_unmanaged_claim_fails_the_deployment_and_writes_nothing(
    controller: Controller, cluster: Cluster
) -> None:
    volumes = [
        {"name": "cache", "purpose": "modelCache", "size": "20Gi"},
        {"name": "compiled", "purpose": "compilationCache", "size": "1Gi"},
    ]
    foreign = await cluster.kube.create(claim(cluster, "qwen-compiled"))  # the name Jetway plans for the second volume
    await cluster.kube.create(deployment_manifest(cluster, **{VOLUMES: volumes}))

    md = await eventually(
        lambda: storage_is(cluster, "False", "PVCFailed", "qwen-compiled", failed=True), timeout=TIMEOUT, message="conflict"
    )
    message = condition(md, "StorageReady")["message"]
    assert 'PersistentVolumeClaim "qwen-compiled" already exists' in message and "not managed by Jetway" in message
    assert "delete or rename" in message and "Traceback" not in message
    assert "qwen-compiled" in md["status"]["message"]
    # nothing of the plan written: not the claim before it, not the download Job; no workload rendered on it
    assert await get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-cache") is None
    assert await get_obj(cluster, "batch/v1", "Job", "qwen-model-download") is None
    assert await get_obj(cluster, "apps/v1", "Deployment", "qwen") is None
    left = await cluster.kube.get("v1", "PersistentVolumeClaim", "qwen-compiled", cluster.namespace)
    assert left["metadata"]["uid"] == foreign["metadata"]["uid"] and not left["metadata"].get("ownerReferences")

    # the name freed, the next pass writes the plan and the failure is over
    await cluster.kube.delete("v1", "PersistentVolumeClaim", "qwen-compiled", cluster.namespace)

    async def ours() -> dict[str, Any] | None:
        found = await get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-compiled")
        return found if found and found["metadata"].get("ownerReferences") else None

    await eventually(ours, timeout=TIMEOUT, message="Jetway's claim written once the name is free")
    await eventually(lambda: storage_is(cluster, "True", "PVCsBound"), timeout=TIMEOUT, message="storage ready")
    assert await get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-cache") is not None
