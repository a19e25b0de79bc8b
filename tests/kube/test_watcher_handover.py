"""A watcher taking over (a restart, another replica) rebuilds `ClusterSync.live`, the cache of the
objects the API server shows, from its first list, and writes nothing from an empty or stale one: its
start-up pass runs before that list and writes nothing, and what it writes after is guarded by the
resourceVersion it listed (services/watcher/cluster.py says why live objects are not events)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contracts.subjects import Key
from testbed.controller import Controller, running_controller
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.support.kubecases import TIMEOUT, deployment_manifest, get_md, phase_is
from tests.support.nats import NatsEndpoint


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    async with running_controller(nats.url, cluster) as running:
        yield running


async def test_a_watcher_taking_over_refills_the_live_objects_from_its_first_list(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(deployment_manifest(cluster))
    await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
    key = Key("ModelDeployment", cluster.namespace, "qwen")
    old = controller.runners["watcher"]
    settled = old.passes
    await eventually(lambda: old.passes >= settled + 2, timeout=TIMEOUT, message="the old watcher wrote what there is")
    await controller.stop("watcher")
    writes = cluster.emulator.writes_to("ModelDeployment", "qwen") if cluster.emulator is not None else 0

    await controller.start("watcher")  # returns once its first lists are handled (ClusterSync.ready)
    runner = controller.runners["watcher"]
    assert runner.passes >= 1  # its start-up pass ran before the lists, with nothing live to write from
    sync = controller.sync

    async def listed_is_current() -> bool:
        md = await get_md(cluster)
        live = sync.live.get(key)
        return md is not None and live is not None and live["metadata"]["resourceVersion"] == md["metadata"]["resourceVersion"]

    await eventually(listed_is_current, timeout=TIMEOUT, message="the new watcher's live object is the server's")
    assert sync.live[key]["spec"] == (await get_md(cluster) or {})["spec"]
    start = runner.passes
    await eventually(lambda: runner.passes >= start + 2, timeout=TIMEOUT, message="two level-triggered passes")
    assert await phase_is(cluster, "Deploying")
    if cluster.emulator is not None:  # the status the old one wrote is what the new one wants: not written again
        assert cluster.emulator.writes_to("ModelDeployment", "qwen") == writes
