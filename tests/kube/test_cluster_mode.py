"""Jetway as a Kubernetes controller, end to end: the real services on real NATS against the API
emulator (or the cluster KUBECONFIG names)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from contracts.cluster import CLEANUP_FINALIZER
from contracts.subjects import Key
from runtime.kube import NotFound
from testbed.controller import Controller, running_controller
from testbed.kubeapi import Cluster, foreign_crd
from testbed.waiting import eventually
from tests.support.kubecases import (
    MDV,
    TIMEOUT,
    condition,
    deployment_manifest,
    get_md,
    get_obj,
    history,
    move_deployment,
    phase_is,
    phases_of,
)
from tests.support.nats import NatsEndpoint
from tests.support.tcpproxy import TcpProxy


@pytest.fixture
async def controller(nats: NatsEndpoint, cluster: Cluster) -> AsyncIterator[Controller]:
    async with running_controller(nats.url, cluster) as running:
        yield running


async def test_a_deployment_gets_its_objects_and_its_status_follows_the_cluster(controller: Controller, cluster: Cluster) -> None:
    async with phases_of(cluster.kube, cluster.namespace, "qwen") as phases:
        created = await cluster.kube.create(deployment_manifest(cluster))
        uid = created["metadata"]["uid"]
        for api_version, kind, name in (
            ("apps/v1", "Deployment", "qwen"),
            ("v1", "Service", "qwen"),
            ("v1", "PersistentVolumeClaim", "qwen-cache"),
        ):
            obj = await eventually(
                lambda a=api_version, k=kind, n=name: get_obj(cluster, a, k, n), timeout=TIMEOUT, message=f"{kind} created"
            )
            owner = obj["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("ModelDeployment", "qwen", uid, True)
            labels = obj["metadata"]["labels"]
            assert (labels["airunway.ai/managed-by"], labels["app.kubernetes.io/managed-by"]) == ("airunway", "jetway")
        md = await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
        assert CLEANUP_FINALIZER in md["metadata"]["finalizers"]
        assert condition(md, "ResourceCreated")["status"] == "True"
        assert md["status"]["provider"] == {
            "name": "vllm",
            "selectedReason": md["status"]["provider"]["selectedReason"],
            "resourceName": "qwen",
            "resourceKind": "Deployment",
        }
        await move_deployment(cluster, "qwen", ready=1)
        md = await eventually(lambda: phase_is(cluster, "Running"), timeout=TIMEOUT, message="Running")
        await eventually(lambda: phases[-1:] == ["Running"], timeout=TIMEOUT, message="the watch saw Running")
    assert phases == ["Pending", "Deploying", "Running"]
    ready = condition(md, "Ready")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "DeploymentReady", 1)
    assert md["status"]["replicas"] == {"desired": 1, "ready": 1, "available": 1}
    assert md["status"]["observedGeneration"] == md["metadata"]["generation"] == 1
    assert all(c["lastTransitionTime"] and c["reason"] for c in md["status"]["conditions"])
    managers = {m["manager"] for m in md["metadata"].get("managedFields", [])}
    assert {"jetway-selector", "jetway-workload", "jetway-storage", "jetway-status"} <= managers  # each service its own fields


async def test_an_edited_spec_is_followed_and_conditions_keep_their_transition_times(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(deployment_manifest(cluster))
    md = await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
    selected_at = condition(md, "ProviderSelected")["lastTransitionTime"]
    await cluster.kube.patch(md, {"spec": {"scaling": {"replicas": 3}}})

    async def scaled() -> dict[str, Any] | None:
        obj = await get_obj(cluster, "apps/v1", "Deployment", "qwen")
        return obj if obj and obj["spec"]["replicas"] == 3 else None

    await eventually(scaled, timeout=TIMEOUT, message="the Deployment scaled to 3")

    async def observed_generation_2() -> dict[str, Any] | None:
        found = await get_md(cluster)
        return found if found and found["status"].get("observedGeneration") == 2 else None

    md = await eventually(observed_generation_2, timeout=TIMEOUT, message="status of generation 2")
    assert md["status"]["replicas"]["desired"] == 3
    assert condition(md, "ProviderSelected")["lastTransitionTime"] == selected_at  # no flip, no new time
    assert condition(md, "ProviderSelected")["observedGeneration"] == 2


async def test_a_deleted_deployment_terminates_cleans_up_and_goes(controller: Controller, cluster: Cluster, nats: NatsEndpoint) -> None:
    await cluster.kube.create(deployment_manifest(cluster))
    await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
    async with phases_of(cluster.kube, cluster.namespace, "qwen") as phases:
        await cluster.kube.delete(MDV, "ModelDeployment", "qwen", cluster.namespace)

        async def all_gone() -> bool:
            left = [
                await get_md(cluster),
                await get_obj(cluster, "apps/v1", "Deployment", "qwen"),
                await get_obj(cluster, "v1", "Service", "qwen"),
                await get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-cache"),
            ]
            return all(o is None or o["metadata"].get("deletionTimestamp") for o in left) and left[0] is None

        await eventually(all_gone, timeout=TIMEOUT, message="the deployment and its objects removed")
    assert "Terminating" in phases

    seen: list[str] = []

    async def deletion_recorded() -> list[str] | None:  # the watcher records it once its watch sees the object go
        seen[:] = await history(nats.url, cluster.namespace, "qwen")
        return list(seen) if "spec:ResourceDeleted.v1" in seen else None

    recorded = await eventually(deletion_recorded, timeout=TIMEOUT, message="ResourceDeleted recorded", shown=lambda: seen)
    # after it, only the cluster's own news of objects it removes later (on the real control plane a claim's
    # protection finalizer, the garbage collector): no service acts on a resource that is gone
    after = recorded[recorded.index("spec:ResourceDeleted.v1") + 1 :]
    assert all(e == "observed:ObjectObserved.v1" for e in after), recorded
    assert "spec:DeletionRequested.v1" in recorded
    # the services cleaned up before the finalizer went (not the garbage collector after it)
    assert recorded.index("workload:WorkloadWithdrawn.v1") < recorded.index("spec:ResourceDeleted.v1")
    assert recorded.index("storage:Withdrawn.v1") < recorded.index("spec:ResourceDeleted.v1")


async def test_a_foreign_object_with_the_same_name_is_a_resource_conflict(controller: Controller, cluster: Cluster) -> None:
    foreign = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "qwen", "namespace": cluster.namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "other"}},
            "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    }
    before = await cluster.kube.create(foreign)
    await cluster.kube.create(deployment_manifest(cluster))
    md = await eventually(lambda: phase_is(cluster, "Failed"), timeout=TIMEOUT, message="Failed")
    created = condition(md, "ResourceCreated")
    assert (created["status"], created["reason"]) == ("False", "ResourceConflict")
    assert "qwen" in created["message"] and "not managed by this ModelDeployment" in created["message"]
    assert condition(md, "Ready")["reason"] == "ResourceConflict"
    after = await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)
    assert after["spec"] == before["spec"] and not after["metadata"].get("ownerReferences")  # left alone


TOUCHED = "jetway.test/touched"


async def test_a_dropped_watch_and_an_expired_one_lose_no_change(nats: NatsEndpoint, cluster: Cluster) -> None:
    # the watcher reaches the API through a proxy that cuts it off (a network partition), the other services directly
    async with (
        TcpProxy(cluster.kube.api.configuration.host) as proxy,
        running_controller(nats.url, cluster, hosts={"watcher": proxy.url}) as controller,
    ):
        watcher = controller.kubes["watcher"]
        await cluster.kube.create(deployment_manifest(cluster, "one"))
        await cluster.kube.create(deployment_manifest(cluster, "two"))
        await eventually(lambda: phase_is(cluster, "Deploying", "two"), timeout=TIMEOUT, message="two Deploying")
        await eventually(lambda: phase_is(cluster, "Deploying", "one"), timeout=TIMEOUT, message="one Deploying")

        # a real server compacts its history every 5 s (and, its watch cache off, sends no bookmarks): the watcher's
        # version must be a recent one for the resume below to find it, so it is moved on just before the cut
        await cluster.kube.patch(await get_md(cluster, "two") or {}, {"metadata": {"annotations": {TOUCHED: "1"}}})
        key = Key("ModelDeployment", cluster.namespace, "two")
        seen = controller.sync.live

        def touched() -> bool:
            return TOUCHED in (seen.get(key, {}).get("metadata", {}).get("annotations") or {})

        await eventually(touched, timeout=TIMEOUT, message="the watcher saw the touch")

        # dropped: changes made while the watcher is cut off arrive when it resumes from its last version
        lists = watcher.requests["list ModelDeployment"]
        proxy.hold()
        await cluster.kube.create(deployment_manifest(cluster, "three"))
        await cluster.kube.delete("v1", "Service", "two", cluster.namespace)  # a hand-deleted object of Jetway's
        proxy.release()
        await eventually(lambda: get_obj(cluster, "apps/v1", "Deployment", "three"), timeout=TIMEOUT, message="three created")
        await eventually(lambda: get_obj(cluster, "v1", "Service", "two"), timeout=TIMEOUT, message="two's Service back")
        assert watcher.requests["list ModelDeployment"] == lists  # resumed, not listed again

        # expired: the history is gone (410), so the watcher lists again and catches up, deletions included
        proxy.hold()
        await cluster.kube.delete(MDV, "ModelDeployment", "one", cluster.namespace)
        md = await cluster.kube.get(MDV, "ModelDeployment", "three", cluster.namespace)
        await cluster.kube.patch(md, {"spec": {"scaling": {"replicas": 2}}})
        _, latest = await cluster.kube.list(MDV, "ModelDeployment", cluster.namespace)  # no older than the watcher's version
        await cluster.compact_past(MDV, "ModelDeployment", latest)
        proxy.release()

        async def caught_up() -> bool:
            three = await get_obj(cluster, "apps/v1", "Deployment", "three")
            return await get_md(cluster, "one") is None and three is not None and three["spec"]["replicas"] == 2

        await eventually(caught_up, timeout=TIMEOUT, message="the changes behind the 410 applied")
        assert watcher.requests["list ModelDeployment"] > lists


async def test_services_restarted_mid_way_converge_without_duplicate_writes(
    controller: Controller, cluster: Cluster, nats: NatsEndpoint
) -> None:
    await controller.stop("workload")
    await cluster.kube.create(deployment_manifest(cluster))
    await eventually(lambda: get_obj(cluster, "v1", "PersistentVolumeClaim", "qwen-cache"), timeout=TIMEOUT, message="storage went ahead")
    await controller.start("workload")
    await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying once the workload is back")
    if cluster.real:  # a real Deployment controller reports on the new Deployment for a moment: let it
        await eventually(lambda: _deployment_reported(cluster, "qwen"), timeout=TIMEOUT, message="the Deployment controller reported")
    # "Deploying" needs only the Deployment's observation: let the Service's and the claim's be recorded too
    watcher = controller.runners["watcher"]
    start = watcher.passes
    await eventually(lambda: watcher.passes >= start + 2, timeout=TIMEOUT, message="the watcher followed")
    written = await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)
    recorded = await history(nats.url, cluster.namespace, "qwen")
    md_version = (await get_md(cluster) or {})["metadata"]["resourceVersion"]

    for name in ("watcher", "workload", "storage", "selector"):
        await controller.restart(name)
    for name in ("watcher", "workload", "storage"):  # two level-triggered passes each: everything re-asserted
        runner = controller.runners[name]
        start = runner.passes
        await eventually(lambda r=runner, s=start: r.passes >= s + 2, timeout=TIMEOUT, message=f"{name} resynced")

    again = await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)
    assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]  # re-applied as a no-op
    assert await history(nats.url, cluster.namespace, "qwen") == recorded  # nothing recorded twice
    assert (await get_md(cluster) or {})["metadata"]["resourceVersion"] == md_version  # status not rewritten
    if cluster.emulator is not None:
        assert cluster.emulator.writes_to("Deployment", "qwen") == 1


async def test_a_hand_deleted_deployment_comes_back_unless_paused(controller: Controller, cluster: Cluster) -> None:
    await cluster.kube.create(deployment_manifest(cluster))
    await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
    first = await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)
    await cluster.kube.delete("apps/v1", "Deployment", "qwen", cluster.namespace)

    async def recreated() -> dict[str, Any] | None:
        obj = await get_obj(cluster, "apps/v1", "Deployment", "qwen")
        return obj if obj and obj["metadata"]["uid"] != first["metadata"]["uid"] else None

    await eventually(recreated, timeout=TIMEOUT, message="the Deployment re-created")

    md = await cluster.kube.get(MDV, "ModelDeployment", "qwen", cluster.namespace)
    await cluster.kube.patch(md, {"metadata": {"annotations": {"airunway.ai/reconcile-paused": "true"}}})
    workload = controller.runners["workload"]

    async def paused_seen() -> bool:
        state: Any = workload.service
        found = [d for k, d in state.state.deployments.items() if k.name == "qwen"]
        return bool(found and found[0].paused)

    await eventually(paused_seen, timeout=TIMEOUT, message="the pause recorded")
    # a pass begun before the pause was seen may still be writing (a conflict retried re-creates what it finds
    # gone): two whole passes after it, nothing of it is left in flight
    seen = workload.passes
    await eventually(lambda: workload.passes >= seen + 2, timeout=TIMEOUT, message="two passes after the pause")
    await cluster.kube.delete("apps/v1", "Deployment", "qwen", cluster.namespace)
    start = workload.passes
    await eventually(lambda: workload.passes >= start + 2, timeout=TIMEOUT, message="two resyncs")
    with pytest.raises(NotFound):
        await cluster.kube.get("apps/v1", "Deployment", "qwen", cluster.namespace)


async def test_an_object_created_while_the_webhook_was_down_is_refused_with_its_reasons(controller: Controller, cluster: Cluster) -> None:
    # (most rules are also CEL rules in the CRD, which the API server enforces itself; this one is not)
    await cluster.kube.create(deployment_manifest(cluster, "bad", **{"spec.model.id": "PLACEHOLDER-model-id"}))
    md = await eventually(lambda: phase_is(cluster, "Failed", "bad"), timeout=TIMEOUT, message="refused")
    validated = condition(md, "Validated")
    assert (validated["status"], validated["reason"]) == ("False", "ValidationFailed")
    assert "spec.model.id" in validated["message"] and "placeholder" in validated["message"]
    assert await get_obj(cluster, "apps/v1", "Deployment", "bad") is None

    # managed storage changed behind the webhook's back: the accepted spec keeps running, the status says why
    await cluster.kube.create(deployment_manifest(cluster))
    md = await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="Deploying")
    volumes = md["spec"]["model"]["storage"]["volumes"]
    await cluster.kube.patch(md, {"spec": {"model": {"storage": {"volumes": [{**volumes[0], "size": "40Gi"}]}}}})
    md = await eventually(lambda: phase_is(cluster, "Failed"), timeout=TIMEOUT, message="the change refused")
    validated = condition(md, "Validated")
    assert validated["status"] == "False" and "spec.model.storage.volumes[0]" in validated["message"]
    claim = await cluster.kube.get("v1", "PersistentVolumeClaim", "qwen-cache", cluster.namespace)
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    await cluster.kube.patch(md, {"spec": {"model": {"storage": {"volumes": volumes}}}})  # put back: accepted again
    await eventually(lambda: phase_is(cluster, "Deploying"), timeout=TIMEOUT, message="back to Deploying")
    assert condition(await get_md(cluster) or {}, "Validated")["status"] == "True"


async def test_providers_register_in_the_cluster_and_follow_their_operators_crds(controller: Controller, cluster: Cluster) -> None:
    async def ready(name: str) -> bool | None:
        config = await cluster.kube.get_or_none(MDV, "InferenceProviderConfig", name)
        return None if config is None else (config.get("status") or {}).get("ready")

    assert await eventually(lambda: ready("vllm"), timeout=TIMEOUT, message="vllm registered and ready")
    cluster.need_cluster_wide()  # installs another project's CRD
    await eventually(lambda: _is(ready("dynamo"), False), timeout=TIMEOUT, message="dynamo registered, not ready")
    await cluster.install(foreign_crd("nvidia.com", "v1alpha1", "DynamoGraphDeployment", "dynamographdeployments"))
    await eventually(lambda: ready("dynamo"), timeout=TIMEOUT, message="dynamo ready once its CRD is served")
    await cluster.uninstall("dynamographdeployments.nvidia.com")
    await eventually(lambda: _is(ready("dynamo"), False), timeout=TIMEOUT, message="dynamo not ready once its CRD is gone")


async def _deployment_reported(cluster: Cluster, name: str) -> bool:
    found = await get_obj(cluster, "apps/v1", "Deployment", name) or {}
    reported = found.get("status") or {}
    types = {c["type"] for c in reported.get("conditions", [])}
    return reported.get("observedGeneration") == found["metadata"]["generation"] and {"Available", "Progressing"} <= types


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
