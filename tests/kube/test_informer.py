"""The informer (runtime/informer.py) on its own, against the emulator and a real API server: list, then
watch; a dropped watch resumes from the last resourceVersion seen without a list; only an expired one
(410 Gone) lists again, and the list tells the reader what the gap hid, deletions included."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime.informer import Cache, Informer
from runtime.kube import Kube
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.support.tcpproxy import TcpProxy

LABEL = "jetway.test/informer"
TIMEOUT = 60


def config_map(cluster: Cluster, name: str, value: str = "1") -> dict[str, Any]:
    meta = {"name": name, "namespace": cluster.namespace, "labels": {LABEL: "yes"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}


@contextlib.asynccontextmanager
async def cached(cluster: Cluster, kube: Kube) -> AsyncIterator[Cache]:
    """A cache of the test's labelled ConfigMaps (the label keeps a real server's churn and its own out), through `kube`."""
    cache = Cache(kube, "v1", "ConfigMap", namespace=cluster.namespace, label_selector=f"{LABEL}=yes", retry_delay=0.05)
    task = asyncio.create_task(cache.run())
    try:
        await eventually(lambda: cache.synced, timeout=TIMEOUT, message="listed")
        yield cache
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def data(cache: Cache, name: str) -> str | None:
    found = cache.get(cache.informer.namespace or "", name)
    return None if found is None else found["data"]["v"]


async def touched(cluster: Cluster, cache: Cache, name: str, value: str) -> None:
    """Change `name` and wait until the cache shows it: the informer's version is then the server's latest
    (a real server compacts its history every 5 s and, its watch cache off, sends no bookmarks)."""
    await cluster.kube.apply(config_map(cluster, name, value), manager="jetway-tests")
    await eventually(lambda: data(cache, name) == value, timeout=TIMEOUT, message=f"{name}={value} seen")


async def test_a_list_then_a_watch_show_every_change(cluster: Cluster) -> None:
    await cluster.kube.apply(config_map(cluster, "before"), manager="jetway-tests")
    async with cached(cluster, cluster.kube) as cache:
        assert data(cache, "before") == "1" and cache.informer.lists == 1
        await touched(cluster, cache, "after", "1")
        await touched(cluster, cache, "before", "2")
        await cluster.kube.delete("v1", "ConfigMap", "before", cluster.namespace)
        await eventually(lambda: cache.get(cluster.namespace, "before") is None, timeout=TIMEOUT, message="the deletion seen")
        assert cache.informer.lists == 1 and cache.informer.restarts == 0
        unlabelled = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": cluster.namespace}}
        await cluster.kube.create(unlabelled)
        await touched(cluster, cache, "after", "2")
        assert cache.get(cluster.namespace, "other") is None  # the selector holds on the watch too


async def test_a_dropped_watch_resumes_from_the_last_version_without_a_list(cluster: Cluster) -> None:
    async with TcpProxy(str(cluster.kube.api.configuration.host)) as proxy:
        kube = await cluster.connect()
        kube.api.configuration.host = proxy.url
        try:
            async with cached(cluster, kube) as cache:
                await touched(cluster, cache, "one", "1")
                version = cache.informer.version
                watches = kube.requests["watch ConfigMap"]
                proxy.hold()  # the watch is cut, and cannot come back until released
                await cluster.kube.apply(config_map(cluster, "one", "2"), manager="jetway-tests")
                await cluster.kube.apply(config_map(cluster, "two"), manager="jetway-tests")
                proxy.release()
                await eventually(lambda: data(cache, "one") == "2" and data(cache, "two") == "1", timeout=TIMEOUT, message="caught up")
                assert kube.requests["watch ConfigMap"] > watches  # watched again, from `version` on
                assert int(cache.informer.version) > int(version)
                assert cache.informer.lists == 1 and kube.requests["list ConfigMap"] == 1  # resumed, never listed again
        finally:
            await kube.close()


async def test_only_an_expired_watch_lists_again_and_the_list_shows_what_the_gap_hid(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jetway.informer")
    await cluster.kube.apply(config_map(cluster, "doomed"), manager="jetway-tests")
    async with TcpProxy(str(cluster.kube.api.configuration.host)) as proxy:
        kube = await cluster.connect()
        kube.api.configuration.host = proxy.url
        try:
            async with cached(cluster, kube) as cache:
                await touched(cluster, cache, "kept", "1")
                proxy.hold()
                await cluster.kube.delete("v1", "ConfigMap", "doomed", cluster.namespace)
                await cluster.kube.apply(config_map(cluster, "kept", "2"), manager="jetway-tests")
                await cluster.compact_past("v1", "ConfigMap", cache.informer.version)  # the watch's version is gone now
                proxy.release()
                await eventually(lambda: cache.informer.lists == 2, timeout=TIMEOUT, message="listed again")
                assert cache.get(cluster.namespace, "doomed") is None and data(cache, "kept") == "2"
                assert cache.informer.restarts == 0
        finally:
            await kube.close()
    assert "watch of ConfigMap expired: listing again" in [r.getMessage() for r in caplog.records if r.name == "jetway.informer"]


async def test_a_reader_that_fails_starts_over_from_a_list(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jetway.informer")
    seen: list[tuple[str, str]] = []
    lists: list[list[str]] = []
    failing = {"boom"}

    async def on_change(change: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name in failing:
            failing.discard(name)
            raise RuntimeError(f"a reader's bug, on {name}")
        seen.append((change, name))

    async def on_list(kind: str, items: list[dict[str, Any]]) -> None:
        lists.append(sorted(i["metadata"]["name"] for i in items))

    informer = Informer(
        cluster.kube,
        "v1",
        "ConfigMap",
        on_change=on_change,
        on_list=on_list,
        namespace=cluster.namespace,
        label_selector=f"{LABEL}=yes",
        retry_delay=0.05,
    )
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: informer.synced.is_set(), timeout=TIMEOUT, message="listed")
        await cluster.kube.create(config_map(cluster, "boom"))
        await eventually(lambda: lists == [[], ["boom"]], timeout=TIMEOUT, message="listed again, boom with it")
        assert informer.restarts == 1
        await cluster.kube.create(config_map(cluster, "after"))
        await eventually(lambda: ("ADDED", "after") in seen, timeout=TIMEOUT, message="a later change arrived")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    failed = [r for r in caplog.records if r.name == "jetway.informer" and r.levelno == logging.ERROR]
    assert len(failed) == 1 and "following ConfigMap failed (RuntimeError: a reader's bug, on boom)" in failed[0].getMessage()
