"""Watching what a real server sends: objects over a mebibyte, metadata-only lists and watches,
the size limits an object meets, and a follow loop that fails and comes back (on the emulator and
on a real API server alike)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import aiohttp
import pytest

from runtime.kube import METADATA, METADATA_LIST, EventTooLarge, Kube, KubeError
from services.watcher.cluster import CRDS, ClusterSync
from services.watcher.handlers import WatcherService
from testbed.kubeapi import Cluster, foreign_crd
from testbed.waiting import eventually

MIB = 1024 * 1024
DATA = 1_000_000  # a ConfigMap's values may hold 1 MiB at most
NOTE = 200_000  # and its annotations 256 KiB


def big_config_map(namespace: str, name: str = "big") -> dict[str, Any]:
    """A ConfigMap of ~1.2 MB: as big as one gets (its data and its annotations each near their limit)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"note": "n" * NOTE}},
        "data": {"blob": "x" * DATA},
    }


def deployment(namespace: str, name: str, env_bytes: int) -> dict[str, Any]:
    """A Deployment of no replicas (no pods) with one environment variable of `env_bytes`."""
    container = {"name": "c", "image": "nginx", "env": [{"name": "BLOB", "value": "x" * env_bytes}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }


async def _events(kube: Kube, version: str, namespace: str, name: str, **options: Any) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    # one object's: a real server's controller adds kube-root-ca.crt to each new namespace meanwhile
    async for change, obj in kube.watch("v1", "ConfigMap", version, namespace=namespace, timeout=30, **options):
        if change != "BOOKMARK" and obj["metadata"]["name"] == name:
            yield change, obj


async def _first_event(kube: Kube, version: str, namespace: str, name: str = "big", **options: Any) -> tuple[str, dict[str, Any]]:
    async def first() -> tuple[str, dict[str, Any]]:
        async with contextlib.aclosing(_events(kube, version, namespace, name, **options)) as events:
            async for event in events:
                return event
        raise AssertionError("the watch ended with no event")

    return await asyncio.wait_for(first(), 30)


async def test_an_object_over_a_mebibyte_comes_through_list_and_watch(cluster: Cluster) -> None:
    _, before = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    created = await cluster.kube.create(big_config_map(cluster.namespace))
    change, seen = await _first_event(cluster.kube, before, cluster.namespace)
    assert change == "ADDED" and seen["metadata"]["name"] == "big"
    assert len(seen["data"]["blob"]) == DATA and len(seen["metadata"]["annotations"]["note"]) == NOTE
    assert len(json.dumps(seen)) > MIB  # one line of the stream
    assert seen["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    items, _ = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    assert [len(i["data"]["blob"]) for i in items if i["metadata"]["name"] == "big"] == [DATA]


async def test_a_watch_event_past_the_bound_cuts_the_stream_with_a_clear_error(cluster: Cluster) -> None:
    _, before = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    await cluster.kube.create(big_config_map(cluster.namespace))
    with pytest.raises(EventTooLarge) as cut:
        await _first_event(cluster.kube, before, cluster.namespace, max_event_bytes=MIB)
    assert "ConfigMap" in cut.value.message and str(MIB) in cut.value.message


async def test_objects_meet_the_servers_size_limits(cluster: Cluster) -> None:
    ns = cluster.namespace

    async def refused(obj: dict[str, Any]) -> KubeError:
        with pytest.raises(KubeError) as refusal:
            await cluster.kube.create(obj)
        return refusal.value

    too_much_data = big_config_map(ns, "data")
    too_much_data["data"]["more"] = "x" * (MIB - DATA + 1)
    found = await refused(too_much_data)
    assert (found.status, found.reason) == (422, "Invalid") and "Too long: may not be more than 1048576 bytes" in found.message
    noted = big_config_map(ns, "noted")
    noted["metadata"]["annotations"]["more"] = "n" * (256 * 1024 - NOTE)
    found = await refused(noted)
    assert found.status == 422 and "metadata.annotations: Too long: may not be more than 262144 bytes" in found.message
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}}
    secret["data"] = {"k": base64.b64encode(b"x" * (MIB + 1)).decode()}  # its values are counted decoded
    found = await refused(secret)
    assert found.status == 422 and "data: Too long" in found.message

    stored = await cluster.kube.create(deployment(ns, "fits", 1_200_000))  # no 1 MiB rule for a Deployment: etcd's ~1.5 MiB
    assert len(stored["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"]) == 1_200_000
    found = await refused(deployment(ns, "etcd", 2_000_000))
    assert found.status == 500 and "request is too large" in found.message
    found = await refused(deployment(ns, "body", 3 * MIB + 1))
    assert (found.status, found.reason) == (413, "RequestEntityTooLarge")


async def test_metadata_only_lists_and_watches(cluster: Cluster) -> None:
    ns = cluster.namespace
    _, before = await cluster.kube.list("v1", "ConfigMap", ns)
    await cluster.kube.create(big_config_map(ns))
    items, version = await cluster.kube.list("v1", "ConfigMap", ns, metadata_only=True)
    mine = [i for i in items if i["metadata"]["name"] == "big"]
    assert [(i["kind"], i["apiVersion"]) for i in mine] == [("PartialObjectMetadata", "meta.k8s.io/v1")]
    assert "data" not in mine[0] and version
    change, seen = await _first_event(cluster.kube, before, ns, metadata_only=True)
    assert (change, seen["kind"], seen["metadata"]["name"]) == ("ADDED", "PartialObjectMetadata", "big")
    assert "data" not in seen and len(json.dumps(seen)) < DATA

    path = cluster.kube.resource("v1", "ConfigMap").path(ns)
    empty = await cluster.kube.request("GET", path, query=[("labelSelector", "none=here")], accept=METADATA_LIST)
    assert (empty["kind"], empty["items"]) == ("PartialObjectMetadataList", None)  # null, not []: `list` must cope
    # the list's version is the server's latest, which other writers (a real server's controllers) move on
    items, version = await cluster.kube.list("v1", "ConfigMap", ns, "none=here", metadata_only=True)
    assert items == [] and int(version) >= int(empty["metadata"]["resourceVersion"])
    with pytest.raises(KubeError) as wrong_form:
        await cluster.kube.request("GET", path, accept=METADATA)  # the object form for a list
    assert (wrong_form.value.status, wrong_form.value.reason) == (406, "NotAcceptable")
    one = await cluster.kube.request("GET", cluster.kube.resource("v1", "ConfigMap").path(ns, "big"), accept=METADATA)
    assert (one["kind"], one["metadata"]["name"]) == ("PartialObjectMetadata", "big") and "data" not in one


async def test_a_watch_asking_for_the_list_form_ends_with_nothing(cluster: Cluster) -> None:
    """A real server's quirk, kept by the emulator: a watch must ask for PartialObjectMetadata, not the List."""
    _, before = await cluster.kube.list("v1", "ConfigMap", cluster.namespace)
    await cluster.kube.create(big_config_map(cluster.namespace))
    response = await cluster.kube.api.call_api(
        cluster.kube.resource("v1", "ConfigMap").path(cluster.namespace),
        "GET",
        query_params=[("watch", "true"), ("resourceVersion", before), ("timeoutSeconds", 30)],
        header_params={"Accept": METADATA_LIST},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    try:
        assert response.status == 200 and await asyncio.wait_for(response.read(), 30) == b""
    finally:
        response.release()


# --- the watcher's follow loop ----------------------------------------------------------------


class Seen:
    """A follow's handlers for a test: what they saw, and a failure to raise once on an object of `fail_on`."""

    def __init__(self, fail_on: str | None = None, failure: Exception | None = None) -> None:
        self.changes: list[tuple[str, str]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.lists = 0
        self.fail_on = fail_on
        self.failure = failure or RuntimeError(f"a handler's bug, on {fail_on}")

    async def on_change(self, change: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name == self.fail_on:
            self.fail_on = None
            raise self.failure
        self.changes.append((change, name))
        self.objects[name] = obj

    async def on_list(self, kind: str, items: list[dict[str, Any]]) -> None:
        self.lists += 1
        for obj in items:
            self.objects[obj["metadata"]["name"]] = obj


@contextlib.asynccontextmanager
async def following(
    cluster: Cluster, seen: Seen, api_version: str = "v1", kind: str = "ConfigMap", **options: Any
) -> AsyncIterator[ClusterSync]:
    """The watcher's own follow loop for one kind, with the test's handlers (a short retry delay)."""
    sync = ClusterSync(cluster.kube, WatcherService(), namespace=cluster.namespace, retry_delay=0.05)
    task = asyncio.create_task(sync.follow(api_version, kind, seen.on_change, seen.on_list, label_selector=None, **options))
    try:
        await eventually(lambda: seen.lists, timeout=30, message="listed")
        yield sync
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_follow_loop_takes_objects_over_a_mebibyte(cluster: Cluster) -> None:
    await cluster.kube.create(big_config_map(cluster.namespace, "listed"))
    seen = Seen()
    async with following(cluster, seen) as sync:
        assert len(seen.objects["listed"]["data"]["blob"]) == DATA
        await cluster.kube.create(big_config_map(cluster.namespace, "watched"))
        await eventually(lambda: ("ADDED", "watched") in seen.changes, timeout=30, message="the big one watched")
        assert len(seen.objects["watched"]["data"]["blob"]) == DATA
        assert sync.restarts[("v1", "ConfigMap")] == 0 and seen.lists == 1  # no drop, no relist


async def test_a_follow_that_fails_comes_back_and_says_so(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jetway.watcher.cluster")
    seen = Seen(fail_on="boom")
    async with following(cluster, seen) as sync:
        await cluster.kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "boom", "namespace": cluster.namespace}})
        await eventually(lambda: sync.restarts[("v1", "ConfigMap")] == 1, timeout=30, message="the follow started again")
        await eventually(lambda: seen.lists == 2 and "boom" in seen.objects, timeout=30, message="listed again, boom with it")
        await cluster.kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": cluster.namespace}})
        await eventually(lambda: ("ADDED", "after") in seen.changes, timeout=30, message="a later change arrived")
    failed = [r for r in caplog.records if r.name == "jetway.watcher.cluster" and r.levelno == logging.ERROR]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "following ConfigMap failed (RuntimeError: a handler's bug, on boom)" in failed[0].getMessage()
    assert "starting it again from a list" in failed[0].getMessage()


async def test_a_handler_cut_off_from_the_api_has_its_event_again(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jetway.watcher.cluster")
    seen = Seen(fail_on="cut", failure=aiohttp.ServerDisconnectedError())  # a status write that broke off
    async with following(cluster, seen) as sync:
        await cluster.kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cut", "namespace": cluster.namespace}})
        await eventually(lambda: ("ADDED", "cut") in seen.changes, timeout=30, message="the event handled on its second coming")
        assert sync.restarts[("v1", "ConfigMap")] == 0 and seen.lists == 1  # resumed from before it, not listed again
    dropped = [r.getMessage() for r in caplog.records if r.name == "jetway.watcher.cluster" and r.levelno == logging.WARNING]
    assert len(dropped) == 1 and dropped[0].startswith("watch of ConfigMap dropped (Server disconnected): resuming from")


async def test_crds_are_followed_metadata_only(cluster: Cluster) -> None:
    cluster.need_cluster_wide()
    crd: dict[str, Any] = foreign_crd("robustness.jetway.test", "v1", "Huge", "huges")
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "d" * 1_200_000  # CRDs of real projects run this big
    seen = Seen()
    async with following(cluster, seen, *CRDS, metadata_only=True):
        await cluster.install(crd)
        await eventually(lambda: ("ADDED", "huges.robustness.jetway.test") in seen.changes, timeout=30, message="the CRD seen")
        event = seen.objects["huges.robustness.jetway.test"]
        assert event["kind"] == "PartialObjectMetadata" and "spec" not in event
        assert len(json.dumps(event)) < 100_000  # its metadata only, not its 1.2 MB schema
        await cluster.uninstall("huges.robustness.jetway.test")
        await eventually(lambda: ("DELETED", "huges.robustness.jetway.test") in seen.changes, timeout=60, message="the CRD gone")
