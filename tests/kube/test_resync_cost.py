"""What a resync costs, counted by the server (the emulator's counter, a real API server's
`apiserver_request_total`): nothing when nothing changed (the writers compare with their caches,
runtime/kubewriter.py), and one write for what was changed or deleted behind Jetway's back, which comes
back. Every status write the watcher makes changes the status (none repeats what the cluster shows)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
from collections import Counter
from typing import Any

from contracts.objects import MANAGED_BY
from runtime.kube import Kube
from runtime.kubewriter import KubeWriter
from testbed.controller import Controller, running_controller
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.support.kubecases import MDV, deployment_manifest, get_obj, phase_is
from tests.support.nats import NatsEndpoint

TIMEOUT = 90
OBJECTS = (  # what storage and workload write for one vLLM deployment
    ("storage", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "qwen-cache"),
    ("storage", "batch/v1", "Job", "jobs", "qwen-model-download"),
    ("workload", "apps/v1", "Deployment", "deployments", "qwen"),
    ("workload", "v1", "Service", "services", "qwen"),
)
RESOURCES = {o[3] for o in OBJECTS}
SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


async def requests(cluster: Cluster) -> Counter[tuple[str, str, str]]:
    """(verb, resource, subresource) → requests the server has answered; SSA counts as PATCH, as on the wire."""
    if cluster.emulator is not None:
        return Counter(cluster.emulator.calls)
    response = await cluster.kube.api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    found: Counter[tuple[str, str, str]] = Counter()
    for line in (await response.read()).decode().splitlines():
        if matched := SAMPLE.match(line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', matched["labels"]))
            verb = "PATCH" if labels["verb"] == "APPLY" else labels["verb"]
            found[(verb, labels["resource"], labels.get("subresource", ""))] += int(float(matched["value"]))
    return found


def writer(controller: Controller, service: str) -> KubeWriter:
    running: Any = controller.runners[service].service
    found = running.writer
    assert isinstance(found, KubeWriter)
    return found


async def passes(controller: Controller, count: int) -> None:
    """Wait until storage and workload have each completed `count` more level passes (resyncs)."""
    runners = [controller.runners[name] for name in ("storage", "workload")]
    wanted = [r.passes + count for r in runners]
    await eventually(lambda: all(r.passes >= w for r, w in zip(runners, wanted, strict=True)), timeout=TIMEOUT, message="resyncs")


def cached(controller: Controller, cluster: Cluster) -> bool:
    for service, api_version, kind, _, name in OBJECTS:
        cache = writer(controller, service).caches.get((api_version, kind))
        if cache is None or not cache.synced or cache.get(cluster.namespace, name) is None:
            return False
    return True


async def test_a_resync_that_finds_nothing_changed_sends_nothing_and_undoes_drift(nats: NatsEndpoint, cluster: Cluster) -> None:
    async with running_controller(nats.url, cluster) as controller:
        await cluster.kube.create(deployment_manifest(cluster))
        await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
        await eventually(lambda: cached(controller, cluster), timeout=TIMEOUT, message="the writers' caches hold the objects")
        await passes(controller, 1)  # a pass begun before the caches held them is over
        skipped = {s: writer(controller, s).skipped for s in ("storage", "workload")}
        before = await requests(cluster)
        await passes(controller, 2)
        sent = await requests(cluster) - before
        ours = {key: n for key, n in sent.items() if key[1] in RESOURCES and key[0] in ("GET", "PATCH") and not key[2]}
        assert ours == {}  # neither read nor written again
        assert all(writer(controller, s).skipped > skipped[s] for s in skipped)  # the passes went through the writers

        # behind Jetway's back: the Deployment scaled, the claim relabelled, the Service deleted
        deployment = await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)
        replicas = deployment["spec"]["replicas"]
        await cluster.kube.patch(deployment, {"spec": {"replicas": replicas + 2}})
        claim = await cluster.kube.get("v1", "PersistentVolumeClaim", "qwen-cache", cluster.namespace)
        await cluster.kube.patch(claim, {"metadata": {"labels": {MANAGED_BY: "someone-else"}}})
        await cluster.kube.delete("v1", "Service", "qwen", cluster.namespace)

        async def restored() -> bool:
            scaled = await get_obj(cluster, "apps/v1", "Deployment", "qwen")
            labelled = await get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-cache")
            service = await get_obj(cluster, "v1", "Service", "qwen")
            return (
                scaled is not None
                and scaled["spec"]["replicas"] == replicas
                and labelled is not None
                and labelled["metadata"]["labels"][MANAGED_BY] == "airunway"
                and service is not None
            )

        await eventually(restored, timeout=TIMEOUT, message="what was changed or deleted is as Jetway wrote it again")


async def test_every_status_write_changes_the_status(nats: NatsEndpoint, cluster: Cluster) -> None:
    names = [f"s{i}" for i in range(6)]
    statuses: dict[str, list[str]] = {name: [] for name in names}  # each one's status, as each event shows it

    async def watching(kube: Kube, version: str) -> None:
        async for change, obj in kube.watch(MDV, "ModelDeployment", version, namespace=cluster.namespace, timeout=600):
            name = obj["metadata"].get("name")
            if change != "BOOKMARK" and name in statuses:
                shown = json.dumps(obj.get("status") or {}, sort_keys=True)
                if not statuses[name] or statuses[name][-1] != shown:
                    statuses[name].append(shown)

    async with running_controller(nats.url, cluster) as controller:
        _, version = await cluster.kube.list(MDV, "ModelDeployment", cluster.namespace)
        watch = asyncio.create_task(watching(cluster.kube, version))
        try:
            before = await requests(cluster)
            await asyncio.gather(*(cluster.kube.create(deployment_manifest(cluster, name)) for name in names))
            for name in names:
                await eventually(functools.partial(phase_is, cluster, "Deploying", name), timeout=TIMEOUT, message=f"{name} Deploying")
            await passes(controller, 2)  # and resyncs that write nothing more
            writes = (await requests(cluster) - before)[("PATCH", "modeldeployments", "status")]

            def all_seen() -> bool:
                return sum(len(s) - 1 for s in statuses.values()) >= writes  # the first is the empty one of a create

            with contextlib.suppress(AssertionError):
                await eventually(all_seen, timeout=10, message="the watch caught up")
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
    changes = sum(len(s) - 1 for s in statuses.values())
    assert writes == changes, f"{writes} status writes, {changes} of them changed a status"
