"""Jetway on a three-node NATS JetStream cluster, as deploy/ runs it: the streams keep three copies,
and a node killed during a burst of applies loses no acknowledged event; the services carry on
over the other two and every deployment converges."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.js.api import KeyValueConfig, ObjectStoreConfig

from contracts.events import ResourceApplied
from contracts.routing import ROUTING_STREAM
from contracts.subjects import ALL_PARTITIONS, Key, kind_filter
from runtime.bus import DLQ_STREAM, EVENTS_STREAM, StreamSettings, connect, ensure_streams
from runtime.entry import Context
from runtime.eventstore import EventStore
from runtime.leases import BUCKET, Leases, LeaseSettings, bucket
from runtime.leases import STREAM as LEASES_STREAM
from runtime.natsserver import NatsCluster, free_port
from runtime.service import Runner, RunnerSettings
from runtime.snapshots import SnapshotSettings, SnapshotStore
from services.router import main as router_main
from services.router import records as router_records
from services.router.budget import BUCKET as BUDGETS
from services.router.budget import SharedLimiter
from testbed.waiting import eventually
from tests.support.ack_service import AckService
from tests.support.nats import NatsEndpoint, nats_cluster
from tests.support.stack import Burst, Stack, running_pipeline, running_stack

BURST = 1000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    with nats_cluster(tmp_path / "cluster") as running:
        yield running


async def test_the_streams_the_buckets_and_the_snapshots_keep_three_copies_on_a_three_node_cluster(cluster: NatsCluster) -> None:
    """...from a fresh cluster's first start (its peers may still be joining), and one made with a single copy (a
    cluster still forming, or smaller then) is raised to three by the next service to start. One cluster for all:
    each costs seconds to form. (The first real node found the snapshot stores at one copy: tests/node.)"""
    nc = await connect(cluster.url, name="test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)  # waits out the cluster's first leader election
        for stream in (EVENTS_STREAM, DLQ_STREAM):
            info = await js.stream_info(stream)
            assert info.config.num_replicas == 3
            assert info.cluster is not None and info.cluster.leader and len(info.cluster.replicas or []) == 2
        await ensure_streams(js)  # again: nothing to change
        await bucket(js, ttl=10.0)
        assert (await js.stream_info(LEASES_STREAM)).config.num_replicas == 3

        await js.delete_stream(DLQ_STREAM)
        await ensure_streams(js, StreamSettings(replicas=1), update=False)  # made again with one copy
        assert (await js.stream_info(DLQ_STREAM)).config.num_replicas == 1
        await ensure_streams(js, update=False)  # a reader changes nothing
        assert (await js.stream_info(DLQ_STREAM)).config.num_replicas == 1
        await ensure_streams(js)  # a service's next start, copies left to Jetway
        assert (await js.stream_info(DLQ_STREAM)).config.num_replicas == 3

        await js.delete_key_value(BUCKET)
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=10.0, history=1, replicas=1, direct=True))
        await bucket(js, ttl=10.0)
        assert (await js.stream_info(LEASES_STREAM)).config.num_replicas == 3

        snapshots = SnapshotStore(js, "selector")
        await snapshots.put(b"state")
        assert (await js.stream_info(snapshots.stream)).config.num_replicas == 3
        await js.delete_object_store(snapshots.bucket)
        await js.create_object_store(snapshots.bucket, ObjectStoreConfig(bucket=snapshots.bucket, replicas=1))
        await SnapshotStore(js, "selector").put(b"state")  # the next start's store
        assert (await js.stream_info(snapshots.stream)).config.num_replicas == 3
        assert await SnapshotStore(js, "selector").get() == b"state"

        # the router's: its records' stream and its client keys' ledger
        await router_records.ensure_stream(js, 3600.0, 1 << 20)
        assert (await js.stream_info(ROUTING_STREAM)).config.num_replicas == 3
        await SharedLimiter(js, "router-0")._bucket()
        assert (await js.stream_info(f"KV_{BUDGETS}")).config.num_replicas == 3
        await js.delete_key_value(BUDGETS)
        await js.create_key_value(KeyValueConfig(bucket=BUDGETS, ttl=120.0, history=1, replicas=1, direct=True))
        await SharedLimiter(js, "router-1")._bucket()  # the next replica to start
        assert (await js.stream_info(f"KV_{BUDGETS}")).config.num_replicas == 3
    finally:
        await nc.close()


async def test_a_single_server_keeps_one_copy(nats: NatsEndpoint) -> None:
    nc = await connect(nats.url, name="test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await ensure_streams(js)  # again: a single server is not asked for three copies
        assert (await js.stream_info(EVENTS_STREAM)).config.num_replicas == 1
        await bucket(js, ttl=10.0)
        assert (await js.stream_info(LEASES_STREAM)).config.num_replicas == 1
        snapshots = SnapshotStore(js, "selector")
        await snapshots.put(b"state")
        assert (await js.stream_info(snapshots.stream)).config.num_replicas == 1
    finally:
        await nc.close()


@pytest.fixture
async def stack(cluster: NatsCluster, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(cluster.url, tmp_path) as running:
        yield running


@pytest.fixture
async def services(stack: Stack) -> AsyncIterator[list[Runner]]:
    async with running_pipeline(stack.nats_url) as runners:
        yield runners


async def test_a_node_killed_during_a_burst_of_applies_loses_nothing(cluster: NatsCluster, stack: Stack, services: list[Runner]) -> None:
    nc = await connect(cluster.url, name="observer")
    store = EventStore(nc, producer="test")
    leader = (await nc.jetstream().stream_info(EVENTS_STREAM)).cluster
    assert leader is not None and leader.leader
    burst = Burst(stack, BURST)
    await asyncio.wait_for(burst.third.wait(), 120)
    # the stream's leader: the hardest node to lose (its followers must elect another mid-burst)
    await asyncio.to_thread(cluster.member(leader.leader).kill)
    answers = await burst.done()
    try:
        assert sorted(set(answers.values())) == [201], {s: list(answers.values()).count(s) for s in set(answers.values())}

        # every acknowledged apply is in the log, once
        applied = {item.key.name for item in await store.read(kind_filter("ModelDeployment")) if hasattr(item, "key")}
        assert applied == set(answers)

        async def converged() -> bool:
            _, listing = await stack.get("/v1/kinds/md")
            pending = [
                item["metadata"]["name"]
                for item in listing["items"]
                if not any(c["type"] == "ResourceCreated" and c["status"] == "True" for c in item["status"].get("conditions", []))
            ]
            return len(listing["items"]) == BURST and not pending

        await eventually(converged, timeout=240, interval=1.0, message="every deployment rendered after the node was lost")
        _, listing = await stack.get("/v1/kinds/md")
        assert len(listing["items"]) == BURST
    finally:
        await nc.close()


def test_free_ports_are_never_handed_out_twice() -> None:
    """The kernel gives closed probes a port again now and then (4 repeats in 300 draws, measured here): a cluster's
    routes, or a test's servers, would then be told to bind one port twice."""
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


async def test_a_service_started_while_its_stream_has_no_quorum_waits_then_rebuilds_everything(
    cluster: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Two of three nodes down: NATS answers no read of the stream. A service starting then (every pod of a fresh
    install, on the first real node) waits and tries again, rather than exiting; once the nodes are back it
    rebuilds every event, each once."""
    nc = await connect(cluster.url, name="writer")
    await ensure_streams(nc.jetstream())
    store = EventStore(nc, producer="watcher")
    for index in range(20):
        key = Key("InferencePoolMember", "", f"m{index}")
        await store.append(
            key.subject(), ResourceApplied(kind=key.kind, namespace="", name=key.name, generation=1, spec={}), expected_seq=0
        )
    await nc.close()
    for name in ("n1", "n2"):
        await asyncio.to_thread(cluster.member(name).stop)
    reader = await connect(cluster.member("n0").url, name="late-service")
    service = AckService("late")
    runner = Runner(service, reader, settings=RunnerSettings(snapshots=SnapshotSettings(enabled=False)))
    task = asyncio.create_task(runner.run())
    try:
        caplog.set_level(logging.WARNING, logger="jetway.bus")
        await eventually(lambda: task.done() or "NATS did not answer" in caplog.text, timeout=60, message="the service waiting")
        assert not task.done() and not runner.ready.is_set()  # neither failed nor running on half a history
        for name in ("n1", "n2"):
            await asyncio.to_thread(cluster.member(name).start)
        await asyncio.wait_for(runner.ready.wait(), 120)
        assert sorted(service.generation) == sorted(Key("InferencePoolMember", "", f"m{i}") for i in range(20))
    finally:
        runner.stop()
        await asyncio.gather(task, return_exceptions=True)
        await reader.close()


async def test_a_router_started_while_its_cluster_has_no_quorum_waits_then_takes_its_leases(
    cluster: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A fresh install's router pod can start before its NATS cluster has elected leaders: the routing records'
    stream and the lease bucket go unanswered. It waits and tries again rather than exiting (a CI run's install
    saw a router restart once on this, its previous log ending in a JetStream request's timeout)."""
    for name in ("n1", "n2"):
        await asyncio.to_thread(cluster.member(name).stop)
    nc = await connect(cluster.member("n0").url, name="router")
    leases = Leases(nc.jetstream(timeout=2), "router", ALL_PARTITIONS, replica="r0", settings=LeaseSettings(ttl=5.0))
    starting = asyncio.create_task(router_main.start(Context(nc, None)))
    leasing = asyncio.create_task(leases.run())
    try:
        caplog.set_level(logging.WARNING, logger="jetway.bus")

        def waiting() -> bool:
            said = [r.getMessage() for r in caplog.records if "NATS did not answer" in r.getMessage()]
            return (
                starting.done() or leasing.done() or (any("routing records" in m for m in said) and any("lease bucket" in m for m in said))
            )

        await eventually(waiting, timeout=60, message="the router's start and its leases waiting for a quorum")
        assert not starting.done() and not leasing.done()
        for name in ("n1", "n2"):
            await asyncio.to_thread(cluster.member(name).start)
        await asyncio.wait_for(starting, 120)
        assert ROUTING_STREAM in {info.config.name for info in await nc.jetstream().streams_info()}
        await eventually(lambda: leases.holds() == set(ALL_PARTITIONS), timeout=60, message="every partition leased")
    finally:
        starting.cancel()
        leases.stop()
        await asyncio.gather(starting, leasing, return_exceptions=True)
        await nc.close()


async def test_a_service_stopped_while_nats_keeps_its_rebuild_waiting_stops_without_failing(
    cluster: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A shard whose lease goes while it rebuilds, on a node too starved for NATS to answer: its stop is a stop. It
    raised NATS's timeout instead, which its replica took for a failure and exited on (a starved run's install saw
    the selector, storage and scaler pods restart on it)."""
    for name in ("n1", "n2"):
        await asyncio.to_thread(cluster.member(name).stop)
    nc = await connect(cluster.member("n0").url, name="late-service")
    runner = Runner(AckService("stopped"), nc, settings=RunnerSettings(snapshots=SnapshotSettings(enabled=False)))
    task = asyncio.create_task(runner.run())
    try:
        caplog.set_level(logging.WARNING, logger="jetway.bus")
        await eventually(lambda: task.done() or "NATS did not answer" in caplog.text, timeout=60, message="the service waiting")
        runner.stop()
        await asyncio.wait_for(task, 30)  # returns: no exception
        assert not runner.ready.is_set()
    finally:
        runner.stop()
        await asyncio.gather(task, return_exceptions=True)
        await nc.close()
