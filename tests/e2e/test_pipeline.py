"""A ModelDeployment through the real pipeline on real NATS: selector, storage and workload services."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from contracts.events import Envelope
from contracts.subjects import Key
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.service import Runner
from services import catalog
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.stack import Stack, running_pipeline, started


@pytest.fixture
async def services(stack: Stack) -> AsyncIterator[list[Runner]]:
    async with running_pipeline(stack.nats_url) as runners:
        yield runners


def provider(name: str, rule: str, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "InferenceProviderConfig",
        "metadata": {"name": name},
        "spec": {
            "capabilities": {"engines": [{"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True}]},
            "selectionRules": [{"condition": rule, "priority": priority}],
        },
        "status": {"ready": True, "version": f"{name}:1"},
    }


async def history(stack: Stack, name: str, namespace: str = "default") -> list[str]:
    nc = await connect(stack.nats_url, name="read")
    try:
        items = await EventStore(nc, producer="t").read(Key("ModelDeployment", namespace, name).history_filter())
        return [f"{i.facet}:{i.type}" for i in items if isinstance(i, Envelope)]
    finally:
        await nc.close()


async def test_apply_a_deployment_and_two_providers_then_see_every_decision(stack: Stack, services: list[Runner]) -> None:
    # two external providers: "heavy" wins for multi-GPU deployments by its rule; neither is rendered by Jetway
    assert (await stack.apply(provider("heavy", "has(spec.resources.gpu) && spec.resources.gpu.count >= 4", 900)))[0] == 201
    assert (await stack.apply(provider("light", "true", 800)))[0] == 201
    status, _ = await stack.apply(changed(MD, {"metadata.name": "big", "spec.resources.gpu.count": 4}))
    assert status == 201

    async def selected() -> dict[str, Any] | None:
        _, view = await stack.get("/v1/kinds/md/big")
        return view["status"] if view["status"].get("provider") else None

    status_ = await eventually(selected, message="a provider selected")
    assert status_["provider"] == {
        "name": "heavy",
        "selectedReason": "matched capabilities: engine=vllm, gpu=true, mode=aggregated; rule priority 900",
    }
    assert status_["engine"] == {"type": "vllm", "selectedReason": "explicit engine selection"}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status_["conditions"]}
    assert conditions["ProviderSelected"] == ("True", "AutoSelected") and conditions["Validated"] == ("True", "ValidationPassed")
    await eventually(lambda: _has(stack, "big", "ResourceCreated"), message="the workload service spoke")
    _, view = await stack.get("/v1/kinds/md/big")
    created = next(c for c in view["status"]["conditions"] if c["type"] == "ResourceCreated")
    assert (created["status"], created["reason"]) == ("Unknown", "ExternalProvider")

    # a deployment for a built-in provider renders its objects, visible through the API
    storage = {
        "spec.model.storage.volumes": [{"name": "cache", "purpose": "modelCache", "size": "20Gi"}],
        "spec.provider": {"name": "vllm"},
    }
    await stack.apply(changed(MD, {"metadata.name": "qwen", **storage}))
    await eventually(lambda: _has(stack, "qwen", "ResourceCreated"), message="rendered")
    # selector and storage both answer the spec, in either order; the workload follows both
    recorded = await history(stack, "qwen")
    assert recorded[0] == "spec:ResourceApplied.v1" and recorded[-1] == "workload:WorkloadRendered.v1"
    assert sorted(recorded[1:-1]) == ["selector:ProviderSelected.v1", "storage:StoragePlanned.v1"]
    _, view = await stack.get("/v1/kinds/md/qwen")
    status_ = view["status"]
    assert status_["phase"] == "Pending" and status_["observedGeneration"] == 1
    assert status_["endpoint"] == {"service": "qwen", "port": 8000}
    assert status_["provider"]["resourceKind"] == "Deployment"
    reasons = {c["type"]: c["reason"] for c in status_["conditions"]}
    assert reasons == {
        "Validated": "ValidationPassed",
        "EngineSelected": "ExplicitSelection",
        "ProviderSelected": "ExplicitSelection",
        "StorageReady": "PVCsPending",
        "ModelDownloaded": "DownloadInProgress",
        "ProviderCompatible": "CompatibilityVerified",
        "UnsupportedImage": "SupportedImage",
        "ImageResolved": "ImageResolutionOff",  # standalone: the default image is used by its tag
        "ImageVerified": "VerificationNotImplemented",
        "ResourceCreated": "ResourceCreated",
        "Ready": "NoCluster",
    }
    _, objects = await stack.get("/v1/kinds/md/qwen/objects")
    assert [o["kind"] for o in objects["objects"]["storage"]] == ["PersistentVolumeClaim", "Job"]
    assert [o["kind"] for o in objects["objects"]["workload"]] == ["Deployment", "Service"]


async def _exists(stack: Stack, path: str) -> bool:
    return (await stack.get(path))[0] == 200


async def _has(stack: Stack, name: str, condition: str) -> bool:
    _, view = await stack.get(f"/v1/kinds/md/{name}")
    return any(c["type"] == condition for c in view["status"].get("conditions", []))


async def test_restarting_the_three_services_re_emits_nothing(stack: Stack, services: list[Runner]) -> None:
    for i in range(5):
        await stack.apply(changed(MD, {"metadata.name": f"m{i}", "spec.provider": {"name": "vllm"}}))
    for i in range(5):
        await eventually(lambda i=i: _has(stack, f"m{i}", "ResourceCreated"), message="rendered")
    nc = await connect(stack.nats_url, name="count")
    store = EventStore(nc, producer="t")
    before = await store.stream_last_seq()
    for runner in services:
        runner.stop()
    again = await started(nc, catalog.PIPELINE)
    tasks = [asyncio.create_task(r.run()) for r in again]
    await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in again)), 20)
    for runner in again:
        await runner.reconcile_all()
    assert await store.stream_last_seq() == before, "a restart must not record anything new"
    for runner in again:
        runner.stop()
    await asyncio.gather(*tasks)
    await nc.close()


async def test_spec_changes_follow_and_a_provider_switch_is_refused(stack: Stack, services: list[Runner]) -> None:
    await stack.apply(changed(MD, {"spec.provider": {"name": "vllm"}}))
    await eventually(lambda: _has(stack, "qwen", "ResourceCreated"), message="rendered")
    await stack.apply(changed(MD, {"spec.provider": {"name": "vllm"}, "spec.scaling": {"replicas": 3}}))

    async def three() -> bool:
        _, found = await stack.get("/v1/kinds/md/qwen/objects")
        workload = found["objects"].get("workload", [])
        return bool(workload) and workload[0]["spec"].get("replicas") == 3

    await eventually(three, message="the new replica count rendered")
    # moving to another provider would orphan the first one's objects: refused, nothing changes
    status, body = await stack.apply(changed(MD, {"spec.provider": {"name": "kuberay"}, "spec.scaling": {"replicas": 3}}))
    assert status == 400
    # said once: the update rules and the provider recorded in status both refuse it
    assert [(e["path"], e["message"]) for e in body["errors"]] == [
        ("spec.provider.name", "provider.name is immutable (changing it requires delete and recreate)")
    ]
    _, found = await stack.get("/v1/kinds/md/qwen/objects")
    assert [o["kind"] for o in found["objects"]["workload"]] == ["Deployment", "Service"]


async def test_unknown_or_incapable_providers_are_refused_and_validation_failures_show_in_status(
    stack: Stack, services: list[Runner]
) -> None:
    # once the workload service's registration of the built-in providers reached the watcher (before any
    # provider is known, admission cannot tell "not found" from "not loaded yet", and only warns)
    await eventually(lambda: _exists(stack, "/v1/kinds/inferenceproviderconfig/vllm"), message="vllm registered")
    # an unknown provider is refused at admission, as AI Runway's webhook does, and nothing is stored
    status, body = await stack.apply(changed(MD, {"spec.engine.type": "sglang", "spec.provider": {"name": "acme"}}))
    assert status == 400
    assert [(e["path"], e["message"]) for e in body["errors"]] == [("spec.provider.name", 'InferenceProviderConfig "acme" not found')]
    missing, _ = await stack.get("/v1/kinds/md/qwen")
    assert missing == 404
    # a provider that cannot run the engine is refused with its capability's words
    status, body = await stack.apply(changed(MD, {"spec.engine.type": "llamacpp", "spec.provider": {"name": "vllm"}}))
    assert status == 400
    assert [(e["path"], e["message"]) for e in body["errors"]] == [("spec.engine.type", "provider vllm does not support engine llamacpp")]
    await stack.apply(
        changed(MD, {"metadata.name": "cpu-only", "spec.engine": {"type": "trtllm"}, "spec.resources": {"gpu": {"count": 0}}})
    )

    async def failed() -> dict[str, Any] | None:
        _, view = await stack.get("/v1/kinds/md/cpu-only")
        return next((c for c in view["status"].get("conditions", []) if c["type"] == "Validated" and c["status"] == "False"), None)

    condition = await eventually(failed, message="validation failure recorded")
    assert condition["message"] == "Validation failed: trtllm engine requires GPU (set resources.gpu.count > 0)"
    _, view = await stack.get("/v1/kinds/md/cpu-only")
    assert view["status"]["phase"] == "Failed"
