"""Two watcher replicas share the cluster by kind (services/watcher/cluster.py GROUPS), through leases: each
follows and writes status for the kinds it holds, every replica folding every event. When the one following
ModelDeployments dies, the other takes its kinds: a deployment created after is ingested, its status written,
and one deleted after loses its finalizer and goes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime.bus import connect
from runtime.leases import LeaseSettings
from services.watcher import main as watcher_main
from services.watcher.cluster import GROUPS, ClusterSync
from testbed.controller import SETTINGS, Controller, running_controller
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.support.kubecases import MDV, TIMEOUT, deployment_manifest, get_md, phase_is
from tests.support.nats import NatsEndpoint

TTL = 4.0
WITHOUT_WATCHER = ("selector", "storage", "workload", "gateway", "binding")


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    async with running_controller(nats.url, cluster, services=WITHOUT_WATCHER) as running:
        yield running


@contextlib.asynccontextmanager
async def watchers(nats_url: str, cluster: Cluster, count: int) -> AsyncIterator[list[tuple[ClusterSync, Any, Any]]]:
    started: list[tuple[ClusterSync, Any, Any, Any, Any]] = []
    namespace = None if cluster.emulator is not None else cluster.namespace
    try:
        for index in range(count):
            nc = await connect(nats_url, name=f"watcher-{index}")
            kube = await cluster.connect()
            watcher = watcher_main.build(
                nc,
                settings=SETTINGS,
                cluster=kube,
                namespace=namespace,
                resync_interval=1.0,
                leases=LeaseSettings(TTL),
                replica=f"w{index}",
            )
            task = asyncio.create_task(watcher.runner.run())
            sync = watcher.service.cluster
            assert sync is not None
            started.append((sync, nc, task, kube, watcher.runner))
        yield [(sync, nc, task) for sync, nc, task, _, _ in started]
    finally:
        for _, _, _, _, runner in started:
            runner.stop()
        for _, nc, task, kube, _ in started:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 20)
            await nc.close()
            await kube.close()


async def test_watcher_replicas_share_the_kinds_and_one_takes_over_when_the_other_dies(
    controller: Controller, cluster: Cluster, nats: NatsEndpoint
) -> None:
    async with watchers(nats.url, cluster, 2) as running:
        syncs = [sync for sync, _, _ in running]

        def shared() -> bool:
            held = sorted(g for sync in syncs for g in sync.held)
            return held == sorted(GROUPS) and all(sync.held for sync in syncs) and all(sync.ready.is_set() for sync in syncs)

        await eventually(shared, timeout=TIMEOUT, message="the kinds shared between the two watchers")
        await cluster.kube.create(deployment_manifest(cluster))
        await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")

        # the one following ModelDeployments dies: its connection goes, nothing is released
        index = next(i for i, sync in enumerate(syncs) if "ModelDeployment" in sync.held)
        _, nc, task = running[index]
        survivor = syncs[1 - index]
        await nc.close()
        task.cancel()
        await eventually(lambda: survivor.held == set(GROUPS) and survivor.ready.is_set(), timeout=60, message="the survivor holds it all")

        await cluster.kube.create(deployment_manifest(cluster, "late"))
        await eventually(lambda: phase_is(cluster, "Deploying", "late"), timeout=TIMEOUT, message="the late one ingested and Deploying")
        for name in ("qwen", "late"):  # deleted after the hand-over: the survivor removes their finalizers
            await cluster.kube.delete(MDV, "ModelDeployment", name, cluster.namespace)

        async def gone() -> bool:
            return await get_md(cluster, "qwen") is None and await get_md(cluster, "late") is None

        await eventually(gone, timeout=TIMEOUT, message="both deleted after the hand-over")
