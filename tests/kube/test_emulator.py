"""The API emulator behaves as a real API server does (run with KUBECONFIG set to check against one)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from runtime.kube import Gone, KubeError, NotFound
from testbed.kubeapi import CRD_API, Cluster, foreign_crd
from testbed.waiting import eventually
from tests.contracts.cases import MD

MDV = "airunway.ai/v1alpha1"

RBAC_API = "rbac.authorization.k8s.io/v1"


def deployment(namespace: str, name: str = "web", replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    }


async def test_create_assigns_identity_and_versions_increase(cluster: Cluster) -> None:
    first = await cluster.kube.create(deployment(cluster.namespace, "a"))
    second = await cluster.kube.create(deployment(cluster.namespace, "b"))
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert first["metadata"]["creationTimestamp"] and first["metadata"]["generation"] == 1
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    with pytest.raises(KubeError) as exists:
        await cluster.kube.create(deployment(cluster.namespace, "a"))
    assert exists.value.status == 409 and exists.value.reason == "AlreadyExists"
    with pytest.raises(NotFound):
        await cluster.kube.get("apps/v1", "Deployment", "nope", cluster.namespace)


async def test_update_with_a_stale_version_is_a_conflict(cluster: Cluster) -> None:
    # a ConfigMap: no controller of a real server writes it between the two updates (a Deployment's would)
    created = await cluster.kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": cluster.namespace}, "data": {"n": "1"}}
    )
    path = cluster.kube.resource("v1", "ConfigMap").path(cluster.namespace, "web")
    fresh = copy.deepcopy(created)
    fresh["data"]["n"] = "2"
    updated = await cluster.kube.request("PUT", path, body=fresh)
    stale = copy.deepcopy(created)
    stale["data"]["n"] = "3"
    with pytest.raises(KubeError) as conflict:
        await cluster.kube.request("PUT", path, body=stale)
    assert conflict.value.status == 409 and conflict.value.reason == "Conflict"
    assert updated["data"]["n"] == "2"
    assert (await cluster.kube.get("v1", "ConfigMap", "web", cluster.namespace))["data"]["n"] == "2"


async def test_generation_moves_with_the_spec_only(cluster: Cluster) -> None:
    created = await cluster.kube.create(deployment(cluster.namespace))
    labelled = await cluster.kube.patch(created, {"metadata": {"labels": {"team": "ml"}}})
    assert labelled["metadata"]["generation"] == 1
    status = await cluster.kube.patch(created, {"status": {"observedGeneration": 1, "replicas": 0}}, subresource="status")
    assert status["metadata"]["generation"] == 1
    scaled = await cluster.kube.patch(created, {"spec": {"replicas": 4}})
    assert scaled["metadata"]["generation"] == 2


async def test_status_subresource_is_apart_from_the_main_resource(cluster: Cluster) -> None:
    created = await cluster.kube.create(deployment(cluster.namespace))
    main = await cluster.kube.patch(created, {"status": {"replicas": 7}})
    assert main.get("status", {}).get("replicas") != 7, "the main resource ignores status"
    status = await cluster.kube.patch(created, {"spec": {"replicas": 9}, "status": {"replicas": 3}}, subresource="status")
    assert status["status"]["replicas"] == 3 and status["spec"]["replicas"] == 1, "the status subresource ignores spec"


async def test_json_patch(cluster: Cluster) -> None:
    created = await cluster.kube.create(deployment(cluster.namespace))
    path = cluster.kube.resource("apps/v1", "Deployment").path(cluster.namespace, "web")
    patched = await cluster.kube.request(
        "PATCH",
        path,
        body=[{"op": "replace", "path": "/spec/replicas", "value": 5}, {"op": "add", "path": "/metadata/labels/tier", "value": "gold"}],
        content_type="application/json-patch+json",
    )
    assert patched["spec"]["replicas"] == 5 and patched["metadata"]["labels"]["tier"] == "gold"
    assert created["metadata"]["resourceVersion"] != patched["metadata"]["resourceVersion"]


async def test_server_side_apply_owns_fields_per_manager(cluster: Cluster) -> None:
    # a ConfigMap: no controller of a real server writes it, so an unchanged apply must leave it as it was
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": cluster.namespace, "labels": {"app": "web"}},
        "data": {"replicas": "1"},
    }
    created = await cluster.kube.apply(obj, manager="alpha")
    assert created["data"]["replicas"] == "1"
    again = await cluster.kube.apply(obj, manager="alpha")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"], "an unchanged apply changes nothing"
    other = configmap(cluster.namespace, "web", replicas="3")
    with pytest.raises(KubeError) as conflict:
        await cluster.kube.apply(other, manager="beta", force=False)
    assert conflict.value.status == 409
    taken = await cluster.kube.apply(other, manager="beta", force=True)
    assert taken["data"]["replicas"] == "3"
    labelled = copy.deepcopy(obj)
    labelled["metadata"]["labels"]["extra"] = "yes"
    del labelled["data"]
    with_label = await cluster.kube.apply(labelled, manager="alpha")
    assert with_label["metadata"]["labels"]["extra"] == "yes"
    del labelled["metadata"]["labels"]["extra"]
    without = await cluster.kube.apply(labelled, manager="alpha")
    assert "extra" not in without["metadata"]["labels"], "a field a manager stops applying is removed"
    assert without["data"]["replicas"] == "3", "beta's field stays"


async def test_two_managers_conditions_live_side_by_side(cluster: Cluster) -> None:
    await cluster.install_crds()
    md = copy.deepcopy(MD)
    md["metadata"]["namespace"] = cluster.namespace
    await cluster.kube.apply(md, manager="user")
    ref = {"apiVersion": MD["apiVersion"], "kind": MD["kind"], "metadata": {"name": "qwen", "namespace": cluster.namespace}}

    def condition(type_: str, status: str) -> dict[str, Any]:
        return {"type": type_, "status": status, "reason": "Testing", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}

    await cluster.kube.apply(
        {**ref, "status": {"conditions": [condition("ProviderSelected", "True")]}}, manager="selector", subresource="status"
    )
    await cluster.kube.apply(
        {**ref, "status": {"conditions": [condition("Ready", "False")], "phase": "Deploying"}}, manager="workload", subresource="status"
    )
    status = (await cluster.kube.get(MD["apiVersion"], "ModelDeployment", "qwen", cluster.namespace))["status"]
    assert {c["type"] for c in status["conditions"]} == {"ProviderSelected", "Ready"}
    await cluster.kube.apply(
        {**ref, "status": {"conditions": [condition("Ready", "True")], "phase": "Running"}}, manager="workload", subresource="status"
    )
    status = (await cluster.kube.get(MD["apiVersion"], "ModelDeployment", "qwen", cluster.namespace))["status"]
    assert {(c["type"], c["status"]) for c in status["conditions"]} == {("ProviderSelected", "True"), ("Ready", "True")}
    assert status["phase"] == "Running"


async def test_an_applied_finalizer_survives_another_clients_update_and_goes_with_its_manager(cluster: Cluster) -> None:
    created = await cluster.kube.create(deployment(cluster.namespace))
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": cluster.namespace}}
    await cluster.kube.apply({**ref, "metadata": {**ref["metadata"], "finalizers": ["example.com/cleanup"]}}, manager="cleaner")
    await cluster.kube.patch(created, {"spec": {"replicas": 2}})  # another client's update touches other fields only
    await cluster.kube.delete("apps/v1", "Deployment", "web", cluster.namespace)
    held = await cluster.kube.get("apps/v1", "Deployment", "web", cluster.namespace)
    assert held["metadata"]["finalizers"] == ["example.com/cleanup"]
    await cluster.kube.apply(ref, manager="cleaner")  # the manager applies without it: its finalizer goes, and so does the object
    with pytest.raises(NotFound):
        await cluster.kube.get("apps/v1", "Deployment", "web", cluster.namespace)


async def test_label_selectors(cluster: Cluster) -> None:
    await cluster.kube.create(deployment(cluster.namespace, "a", labels={"app": "a", "tier": "web"}))
    await cluster.kube.create(deployment(cluster.namespace, "b", labels={"app": "b", "tier": "db"}))
    await cluster.kube.create(deployment(cluster.namespace, "c", labels={"app": "c"}))

    async def names(selector: str) -> list[str]:
        items, _ = await cluster.kube.list("apps/v1", "Deployment", cluster.namespace, selector)
        return sorted(i["metadata"]["name"] for i in items)

    assert await names("tier=web") == ["a"]
    assert await names("tier!=web") == ["b", "c"]
    assert await names("tier in (web,db)") == ["a", "b"]
    assert await names("tier notin (web)") == ["b", "c"]
    assert await names("tier") == ["a", "b"]
    assert await names("!tier") == ["c"]
    assert await names("app=a,tier=web") == ["a"]


def configmap(namespace: str, name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


async def test_list_then_watch_from_a_version(cluster: Cluster) -> None:
    # ConfigMaps: a real server's controllers write Deployments too, and their events would mix in
    await cluster.kube.create(configmap(cluster.namespace, "before"))
    items, version = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    assert [i["metadata"]["name"] for i in items if i["metadata"]["name"] != "kube-root-ca.crt"] == ["before"]
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for kind, obj in cluster.kube.watch("v1", "ConfigMap", version, namespace=cluster.namespace, timeout=30):
            # a real server's root-ca-cert-publisher may make kube-root-ca.crt in the new namespace after the list
            if kind != "BOOKMARK" and obj["metadata"]["name"] != "kube-root-ca.crt":
                seen.append((kind, obj["metadata"]["name"]))
            if len(seen) == 3:
                return

    task = asyncio.create_task(watch())
    created = await cluster.kube.create(configmap(cluster.namespace, "after"))
    await cluster.kube.patch(created, {"data": {"n": "2"}})
    await cluster.kube.delete("v1", "ConfigMap", "after", cluster.namespace)
    await asyncio.wait_for(task, 20)
    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


async def test_watch_sends_bookmarks(cluster: Cluster) -> None:
    if cluster.server is not None and cluster.server.owned:
        pytest.skip("our control plane runs without the watch cache (for real 410s), and bookmarks come from it")
    _, version = await cluster.kube.list("apps/v1", "Deployment", cluster.namespace)
    async for kind, obj in cluster.kube.watch("apps/v1", "Deployment", version, namespace=cluster.namespace, timeout=60):
        if kind == "BOOKMARK":
            assert int(obj["metadata"]["resourceVersion"]) >= int(version)
            break
    else:
        raise AssertionError("no bookmark within the watch")


async def test_a_watch_from_a_compacted_version_is_gone(cluster: Cluster) -> None:
    _, version = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    await cluster.kube.create(configmap(cluster.namespace, "later"))
    await cluster.compact_past("v1", "ConfigMap", version)
    with pytest.raises(Gone):
        async for _ in cluster.kube.watch("v1", "ConfigMap", version, namespace=cluster.namespace, timeout=5):
            pass


async def test_finalizers_hold_deletion_until_removed(cluster: Cluster) -> None:
    obj = deployment(cluster.namespace)
    obj["metadata"]["finalizers"] = ["example.com/cleanup"]
    created = await cluster.kube.create(obj)
    await cluster.kube.delete("apps/v1", "Deployment", "web", cluster.namespace)
    held = await cluster.kube.get("apps/v1", "Deployment", "web", cluster.namespace)
    assert held["metadata"]["deletionTimestamp"]
    await cluster.kube.patch(created, {"metadata": {"finalizers": None}})
    with pytest.raises(NotFound):
        await cluster.kube.get("apps/v1", "Deployment", "web", cluster.namespace)


async def test_dependents_are_garbage_collected(cluster: Cluster) -> None:
    owner = await cluster.kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": cluster.namespace}}
    )
    child = deployment(cluster.namespace, "child")
    child["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]
    await cluster.kube.create(child)
    await cluster.kube.delete("v1", "ConfigMap", "owner", cluster.namespace)

    async def collected() -> bool:
        return await cluster.kube.get_or_none("apps/v1", "Deployment", "child", cluster.namespace) is None

    await eventually(collected, timeout=60, interval=0.1, message="the dependent collected")


async def test_discovery_changes_when_a_crd_is_added(cluster: Cluster) -> None:
    before = await cluster.kube.discover()
    if before.find("airunway.ai/v1alpha1", "ModelDeployment") and cluster.real:
        pytest.skip("the CRDs are already installed in this cluster")
    assert before.find("airunway.ai/v1alpha1", "ModelDeployment") is None
    await cluster.install_crds()
    after = cluster.kube.discovery
    resource = after.find("airunway.ai/v1alpha1", "ModelDeployment")
    assert resource is not None and resource.namespaced and "status" in resource.subresources
    assert after.serves("airdress.co/v1alpha1", "inferencepoolmembers")


async def test_custom_resources_are_defaulted_and_validated(cluster: Cluster) -> None:
    await cluster.install_crds()
    md = copy.deepcopy(MD)
    md["metadata"]["namespace"] = cluster.namespace
    created = await cluster.kube.create(md)
    assert created["spec"]["model"]["source"] == "huggingface", "CRD defaults are applied"
    assert created["spec"]["engine"]["enablePrefixCaching"] is True
    bad = copy.deepcopy(md)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["model"]["storage"] = {"volumes": [{"name": "c", "purpose": "modelCache"}]}
    with pytest.raises(KubeError) as invalid:
        await cluster.kube.create(bad)
    assert invalid.value.status == 422 and "claimName is required" in invalid.value.message


async def test_an_invalid_value_left_unchanged_is_not_judged_again(cluster: Cluster) -> None:
    """Validation ratcheting (API servers since 1.30): a status write to an object stored under older
    rules succeeds while its invalid spec stays as it was; changing that spec is judged."""
    emulator = cluster.need_emulator()
    await cluster.install_crds()
    bad = copy.deepcopy(MD)
    bad["metadata"] = {"name": "old", "namespace": cluster.namespace}
    bad["spec"]["model"]["storage"] = {"volumes": [{"name": "a", "purpose": "custom", "claimName": "c", "mountPath": "rel"}]}
    stored = emulator.store_unchecked(bad)
    await cluster.kube.patch(stored, {"status": {"phase": "Failed"}}, subresource="status")
    with pytest.raises(KubeError) as refused:
        await cluster.kube.patch(
            stored,
            {"spec": {"model": {"storage": {"volumes": [{"name": "a", "purpose": "custom", "claimName": "c", "mountPath": "still-rel"}]}}}},
        )
    assert refused.value.status == 422


async def test_a_crds_change_or_removal_ends_the_watches_on_its_kind(cluster: Cluster) -> None:
    """A CRD's kind is served anew when the CRD's spec changes: the open watches on it end, and a watch
    from the last version seen misses nothing; when the CRD goes, its watches end too."""
    cluster.need_cluster_wide()
    api = "probe.example.com/v1"
    await cluster.install(foreign_crd("probe.example.com", "v1", "Probe", "probes"))
    _, version = await cluster.kube.list(api, "Probe", cluster.namespace)
    seen: list[str] = []

    async def watch(since: str) -> str:
        """Follow until the server ends the watch; the last version seen."""
        async for kind, obj in cluster.kube.watch(api, "Probe", since, namespace=cluster.namespace, timeout=60):
            since = obj["metadata"]["resourceVersion"]
            if kind != "BOOKMARK":
                seen.append(f"{kind} {obj['metadata']['name']}")
        return since

    first = asyncio.create_task(watch(version))
    await cluster.kube.create({"apiVersion": api, "kind": "Probe", "metadata": {"name": "before", "namespace": cluster.namespace}})
    await eventually(lambda: seen == ["ADDED before"], timeout=30, message="the first watch open")  # before the CRD changes
    crd = await cluster.kube.get(CRD_API, "CustomResourceDefinition", "probes.probe.example.com")
    versions = copy.deepcopy(crd["spec"]["versions"])
    versions[0]["schema"]["openAPIV3Schema"]["properties"] = {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    await cluster.kube.patch(crd, {"spec": {"versions": versions}})
    version = await asyncio.wait_for(first, 30)
    assert seen == ["ADDED before"]

    second = asyncio.create_task(watch(version))
    await cluster.kube.create({"apiVersion": api, "kind": "Probe", "metadata": {"name": "after", "namespace": cluster.namespace}})
    await eventually(lambda: seen[1:] == ["ADDED after"], timeout=30, message="the second watch open")
    await cluster.uninstall("probes.probe.example.com")
    await asyncio.wait_for(second, 30)
    assert seen[:2] == ["ADDED before", "ADDED after"]  # then each deleted with the CRD, as the server gets to it
    assert set(seen[2:]) <= {"DELETED before", "DELETED after"}


async def test_a_cluster_scoped_dependent_of_a_namespaced_owner_is_not_collected(cluster: Cluster) -> None:
    """The garbage collector resolves an owner in its dependent's scope: a cluster-scoped object cannot
    have a namespaced owner, so it is left when that owner goes (a real server reports the reference as
    OwnerRefInvalidNamespace); a namespaced dependent goes."""
    cluster.need_cluster_wide()
    owner = await cluster.kube.create(configmap(cluster.namespace, "owner"))
    refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]
    child = configmap(cluster.namespace, "child")
    child["metadata"]["ownerReferences"] = refs
    await cluster.kube.create(child)
    role = f"{cluster.namespace}-dependent"
    await cluster.kube.create({"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": role, "ownerReferences": refs}})
    try:
        await cluster.kube.delete("v1", "ConfigMap", "owner", cluster.namespace)

        async def child_gone() -> bool:
            return await cluster.kube.get_or_none("v1", "ConfigMap", "child", cluster.namespace) is None

        await eventually(child_gone, timeout=30, message="the namespaced dependent collected")
        assert await cluster.kube.get_or_none(RBAC_API, "ClusterRole", role) is not None
    finally:
        await cluster.kube.delete(RBAC_API, "ClusterRole", role)


async def _post(cluster: Cluster, api_version: str, kind: str, body: dict[str, Any], **query: str) -> tuple[int, Any, list[str]]:
    """A create as the wire has it: status, body and the Warning headers."""
    path = cluster.kube.resource(api_version, kind).path(cluster.namespace)
    response = await cluster.kube.api.call_api(
        path,
        "POST",
        query_params=list(query.items()),
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    answer = json.loads(await response.read())
    return response.status, answer, response.headers.getall("Warning", [])


async def test_unknown_fields_are_pruned_with_a_warning_and_refused_when_strict(cluster: Cluster) -> None:
    await cluster.install_crds()
    md = copy.deepcopy(MD)
    md["metadata"]["namespace"] = cluster.namespace
    md["spec"]["madeUp"] = {"x": 1}
    md["spec"]["model"]["alsoMadeUp"] = "y"
    status, stored, warnings = await _post(cluster, MDV, "ModelDeployment", md)
    assert status == 201, stored
    assert "madeUp" not in stored["spec"] and "alsoMadeUp" not in stored["spec"]["model"], "the server prunes them"
    said = " ".join(warnings)
    assert 'unknown field \\"spec.madeUp\\"' in said or 'unknown field "spec.madeUp"' in said, warnings
    md["metadata"]["name"] = "strict"
    status, refused, _ = await _post(cluster, MDV, "ModelDeployment", md, fieldValidation="Strict")
    assert status == 400 and refused["reason"] == "BadRequest", refused
    assert 'unknown field "spec.madeUp"' in refused["message"] and 'unknown field "spec.model.alsoMadeUp"' in refused["message"]
    assert await cluster.kube.get_or_none(MDV, "ModelDeployment", "strict", cluster.namespace) is None


async def test_list_items_come_without_apiversion_and_kind_and_the_client_restores_them(cluster: Cluster) -> None:
    await cluster.kube.create(configmap(cluster.namespace, "listed"))
    raw = await cluster.kube.request("GET", cluster.kube.resource("v1", "ConfigMap").path(cluster.namespace))
    assert raw["kind"] == "ConfigMapList" and all("kind" not in i and "apiVersion" not in i for i in raw["items"])
    items, _ = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    assert {(i["apiVersion"], i["kind"]) for i in items} == {("v1", "ConfigMap")}
