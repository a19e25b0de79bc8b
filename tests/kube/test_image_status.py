"""Direct vLLM's image in a cluster: the workload service resolves the image's tag at a real OCI registry on
127.0.0.1 and the watcher writes `status.image` and the image conditions into the ModelDeployment, on the
API emulator and on a real API server (whose CRD schema would prune a field it does not declare). They
stay once the cluster reports the Deployment ready."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from runtime.bus import connect
from runtime.kubewriter import KubeWriter
from runtime.service import Runner
from services.workload.handlers import WorkloadService
from services.workload.registry import RegistryResolver
from testbed.controller import RESYNC, SERVICES, SETTINGS, Controller, running_controller
from testbed.kubeapi import Cluster
from testbed.registry.fixtures import LABELS, oci
from testbed.registry.server import Registry
from testbed.waiting import eventually
from tests.support.kubecases import TIMEOUT, condition, deployment_manifest, move_deployment, phase_is
from tests.support.nats import NatsEndpoint

__all__ = ["oci"]  # the registry fixture (testbed/registry/fixtures.py)


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    """Jetway's services, the workload service with image resolution on (as `python -m services.workload` runs
    it in a cluster)."""
    async with running_controller(nats.url, cluster, services=tuple(s for s in SERVICES if s != "workload")) as running:
        nc = await connect(nats.url, name="workload")
        kube = await cluster.connect()
        runner = Runner(WorkloadService(KubeWriter(kube), resync_interval=RESYNC, resolver=RegistryResolver()), nc, SETTINGS)
        running.runners["workload"], running.connections["workload"], running.kubes["workload"] = runner, nc, kube
        running.tasks["workload"] = asyncio.create_task(runner.run(), name="workload")
        await asyncio.wait_for(runner.ready.wait(), 30)
        yield running


async def test_status_image_and_its_conditions_reach_the_cluster_and_stay(oci: Registry, controller: Controller, cluster: Cluster) -> None:
    image = oci.ref("acme/vllm:cuda12")
    digest = oci.digest("acme/vllm:cuda12")
    await cluster.kube.create(deployment_manifest(cluster, **{"spec.engine.image": image}))
    md = await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
    status = md["status"]["image"]
    assert (status["requested"], status["digest"], status["resolved"]) == (image, digest, f"{oci.host}/acme/vllm@{digest}")
    assert (status["createdAt"], status["revision"], status["source"]) == (LABELS["org.opencontainers.image.created"], "abc123", "custom")
    assert status["age"] and status["verificationMessage"] and status["message"].startswith("Resolved Direct vLLM image")
    for type_, state, reason in (
        ("ProviderCompatible", "True", "CompatibilityVerified"),
        ("ImageResolved", "True", "ImageResolved"),
        ("ImageVerified", "Unknown", "VerificationNotImplemented"),
        ("UnsupportedImage", "True", "CustomImage"),
    ):
        found = condition(md, type_)
        assert (found.get("status"), found.get("reason")) == (state, reason), found
    deployment = await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image

    await move_deployment(cluster, "qwen", ready=1)
    md = await eventually(lambda: phase_is(cluster, "Running"), timeout=TIMEOUT, message="Running")
    assert md["status"]["image"]["digest"] == digest
    assert condition(md, "ImageResolved")["reason"] == "ImageResolved"
    assert condition(md, "ProviderCompatible")["reason"] == "CompatibilityVerified"
