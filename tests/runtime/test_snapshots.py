"""Snapshots (runtime/snapshots.py) on a real NATS server: every service's projection rebuilt from its
snapshot plus the events after it equals the one a full replay builds; a snapshot of another version or
shape, or one that does not decode, is ignored and the service replays from the start; no secret is in one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client

from contracts.cluster import DISCOVERY, OBSERVED, ApisDiscovered, DeletionRequested, ObjectObserved
from contracts.events import ResourceApplied, ResourceDeleted, new_envelope
from contracts.natsauth import SNAPSHOT_BUCKET_PREFIX
from contracts.subjects import Key
from runtime import settings
from runtime.bus import EVENTS_STREAM, StreamSettings, ensure_streams
from runtime.eventstore import EventStore
from runtime.kube import Kube
from runtime.resources import Resources
from runtime.secrets import FileSecrets
from runtime.service import Runner, RunnerSettings, Service
from runtime.snapshots import BUCKET_PREFIX, Codec, SnapshotSettings, SnapshotStore
from services import catalog
from services.binding.handlers import BindingService
from services.console.handlers import ConsoleService
from services.gateway.handlers import GatewayService
from services.router.handlers import RouterService
from services.router.probe import Prober
from services.router.signal import SignalClient
from services.router.upstream import UpstreamPool
from services.selector.handlers import SelectorService
from services.selector.projection import SelectorState
from services.storage.handlers import StorageService
from services.watcher.handlers import WatcherService
from services.workload.handlers import WorkloadService
from testbed.waiting import eventually
from tests.contracts.cases import AD, APC, IPC, MD, MEMBER, changed
from tests.support.nats import NatsEndpoint
from tests.support.stack import SETTINGS, quiet, running_stack, started

OFTEN = dataclasses.replace(SETTINGS, snapshots=SnapshotSettings(every_events=3, every_seconds=3600.0))
NEVER = dataclasses.replace(SETTINGS, snapshots=SnapshotSettings(enabled=False))
SECRET = b"sk-live-0123456789abcdef-never-in-a-snapshot"
RUNNERS = ("watcher", "console", "selector", "storage", "workload", "router", "gateway", "binding")


def fresh(name: str, nc: Client, secrets: FileSecrets) -> Service:
    """One service as its process builds it, knowing nothing yet."""
    makers: dict[str, Callable[[], Service]] = {
        "watcher": WatcherService,
        "console": ConsoleService,
        "selector": SelectorService,
        "storage": StorageService,
        "workload": WorkloadService,
        "router": lambda: RouterService(Prober(pool=UpstreamPool(), secrets=secrets, signal=SignalClient(nc))),
        # its client is never used by a rebuild: no API server needed to fold the stream
        "gateway": lambda: GatewayService(Kube.at("https://127.0.0.1:9")),
        "binding": BindingService,
    }
    return makers[name]()


def comparable(service: Service) -> Any:
    """The projection, less what is not folded from the stream as stored: the router's live traffic (never
    stored), the console's probe times (from signals, not events: a snapshot keeps them, a full replay cannot),
    and the stream's stored-at times, which a live runner does not know of the decisions it appends and folds
    at once (it uses the producer's time until a replay; docs/event-store.md, "Snapshots")."""
    projection = service.projection()
    if isinstance(service, RouterService):
        return dataclasses.replace(projection, traffic={})
    if isinstance(service, (WatcherService, ConsoleService)):
        resources = Resources(
            {
                key: dataclasses.replace(
                    state,
                    created_at=None,
                    updated_at=None,
                    decisions={owner: msgspec.structs.replace(e, stored_at=None) for owner, e in state.decisions.items()},
                )
                for key, state in projection.resources.items.items()
            },
            projection.resources.last_seq,
        )
        if isinstance(service, ConsoleService):
            return dataclasses.replace(projection, probed_at={}, resources=resources)
        return dataclasses.replace(projection, resources=resources)
    return projection


async def rebuilt(name: str, nc: Client, secrets: FileSecrets, settings: RunnerSettings) -> Runner:
    runner = Runner(fresh(name, nc, secrets), nc, settings)
    await runner.rebuild()
    return runner


async def test_every_service_rebuilds_from_its_snapshot_and_the_tail_what_a_full_replay_builds(
    nats: NatsEndpoint, client: Client, tmp_path: Path
) -> None:
    secrets = FileSecrets(tmp_path / "secrets")
    async with running_stack(nats.url, tmp_path, settings=OFTEN) as stack:
        stack.secrets.set("gpu-a-token", SECRET)
        live = [stack.watcher.runner, stack.router.runner, *await started(client, catalog.STANDALONE, runner=OFTEN)]
        tasks = [asyncio.create_task(r.run()) for r in live[2:]]
        try:
            await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in live)), 20)
            # real inputs through the apply API, and what the watcher records from a cluster
            manifests = [
                IPC,
                APC,
                MD,
                changed(MD, {"metadata.name": "big", "spec.resources.gpu.count": 4}),
                changed(MD, {"metadata.name": "other"}),
                AD,
                changed(AD, {"metadata.name": "helper"}),
                changed(MEMBER, {"spec.authSecretRef": "gpu-a-token"}),
                changed(MEMBER, {"metadata.name": "gpu-b", "spec.url": "https://gpu-b.lab:8000"}),
            ]
            for manifest in manifests:
                status, body = await stack.apply(manifest)
                assert status in (200, 201), body
            store = EventStore(client, producer="watcher")
            await store.append(DISCOVERY.subject("watcher"), ApisDiscovered(resources=("v1/services", "v1/persistentvolumeclaims")))
            qwen, big = Key("ModelDeployment", "default", "qwen"), Key("ModelDeployment", "default", "big")
            await store.append(
                qwen.subject(OBSERVED), ObjectObserved("v1", "PersistentVolumeClaim", "qwen-cache", summary={"phase": "Bound"})
            )
            await store.append(qwen.subject(OBSERVED), ObjectObserved("apps/v1", "Deployment", "qwen", summary={"readyReplicas": 1}))
            await store.append(big.subject(), DeletionRequested("ModelDeployment", "default", "big"))
            status, body = await stack.apply(changed(MD, {"spec.resources.gpu.count": 2}))  # a new generation
            assert status in (200, 201), body
            assert (await stack.delete("/v1/kinds/md/other"))[0] == 200
            await eventually(lambda: quiet(client, live), timeout=30, message="every service caught up")
            unwritten = lambda: [(r.service.name, r.folds) for r in live if not r.snapshots_written]  # noqa: E731
            await eventually(lambda: not unwritten(), timeout=15, message=f"every live service wrote a snapshot {unwritten()}")
        finally:
            for runner in live[2:]:
                runner.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
    # the gateway runs only in a cluster: its snapshot is taken from a rebuild, as a fresh process would
    api = await rebuilt("gateway", client, secrets, OFTEN)
    assert await api.snapshot()
    # the tail: events after every snapshot
    store = EventStore(client, producer="watcher")
    await store.append(Key("ModelDeployment", "default", "big").subject(), ResourceDeleted("ModelDeployment", "default", "big"))
    await store.append(MEMBER_KEY.subject(), ResourceDeleted("InferencePoolMember", "", "gpu-b"))
    await store.append(QWEN.subject(OBSERVED), ObjectObserved("v1", "PersistentVolumeClaim", "qwen-cache", exists=False))

    for name in RUNNERS:
        data = await SnapshotStore(client.jetstream(), name).get()
        assert data is not None and SECRET not in data, name
        restored = await rebuilt(name, client, secrets, OFTEN)
        replayed = await rebuilt(name, client, secrets, NEVER)
        assert restored.restored is not None, name
        assert 0 < restored.restored.seq < replayed.seq, name
        assert restored.replayed < replayed.replayed, name
        assert restored.covered == replayed.covered, name
        assert restored.seen == replayed.seen, name
        assert comparable(restored.service) == comparable(replayed.service), name


MEMBER_KEY = Key("InferencePoolMember", "", "gpu-b")
QWEN = Key("ModelDeployment", "default", "qwen")


async def providers(client: Client, count: int) -> None:
    store = EventStore(client, producer="watcher")
    for n in range(count):
        spec = IPC["spec"]
        await store.append(
            Key("InferenceProviderConfig", "", f"p{n}").subject(), ResourceApplied("InferenceProviderConfig", "", f"p{n}", 1, spec)
        )


async def selector_with_snapshot(client: Client, tmp_path: Path) -> Runner:
    await providers(client, 5)
    first = await rebuilt("selector", client, FileSecrets(tmp_path), OFTEN)
    assert await first.snapshot()
    await providers(client, 7)  # a tail (the same five again, and two more)
    return first


async def test_a_snapshot_of_another_projection_version_is_ignored_and_replay_starts_at_the_beginning(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await selector_with_snapshot(client, tmp_path)
    written = SelectorState.snapshot_version
    monkeypatch.setattr(SelectorState, "snapshot_version", written + 1)  # the code moved on
    caplog.set_level(logging.WARNING, logger="jetway.service")
    runner = await rebuilt("selector", client, FileSecrets(tmp_path), OFTEN)
    assert runner.restored is None and runner.replayed == 12
    assert any("snapshot ignored" in r.getMessage() and f"version {written}" in r.getMessage() for r in caplog.records)
    full = await rebuilt("selector", client, FileSecrets(tmp_path), NEVER)
    assert runner.service.projection() == full.service.projection() and len(full.service.projection().providers) == 7


async def test_a_snapshot_whose_shape_changed_without_a_new_version_is_ignored(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = await selector_with_snapshot(client, tmp_path)
    data = await SnapshotStore(client.jetstream(), "selector").get()
    assert data is not None
    header = msgspec.msgpack.decode(data)
    header["fingerprint"] = "0" * 32  # as if written by code whose projection had other fields
    await SnapshotStore(client.jetstream(), "selector").put(msgspec.msgpack.encode(header))
    caplog.set_level(logging.WARNING, logger="jetway.service")
    runner = await rebuilt("selector", client, FileSecrets(tmp_path), OFTEN)
    assert runner.restored is None and runner.replayed == 12 and first.restored is None
    assert any("snapshot ignored" in r.getMessage() and "shape 00000000" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("corrupt", ["not msgpack", "a state that does not decode"])
async def test_a_corrupt_snapshot_is_ignored_and_replay_starts_at_the_beginning(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture, corrupt: str
) -> None:
    await selector_with_snapshot(client, tmp_path)
    snapshots = SnapshotStore(client.jetstream(), "selector")
    if corrupt == "not msgpack":
        await snapshots.put(b"\xc1 this is not a snapshot")
    else:
        data = await snapshots.get()
        assert data is not None
        header = msgspec.msgpack.decode(data)
        header["state"] = msgspec.msgpack.encode({"deployments": {}, "providers": {"p0": {"name": 3}}})
        await snapshots.put(msgspec.msgpack.encode(header))
    caplog.set_level(logging.WARNING, logger="jetway.service")
    runner = await rebuilt("selector", client, FileSecrets(tmp_path), OFTEN)
    assert runner.restored is None and runner.replayed == 12
    assert any("snapshot ignored" in r.getMessage() for r in caplog.records)
    full = await rebuilt("selector", client, FileSecrets(tmp_path), NEVER)
    assert runner.service.projection() == full.service.projection()  # nothing of the bad snapshot was kept


async def test_a_snapshot_of_a_stream_made_again_is_ignored(client: Client, tmp_path: Path) -> None:
    await selector_with_snapshot(client, tmp_path)
    js = client.jetstream()
    await js.delete_stream(EVENTS_STREAM)  # an operator started the log over: sequences begin at 1 again
    await ensure_streams(js)
    await providers(client, 3)
    runner = await rebuilt("selector", client, FileSecrets(tmp_path), OFTEN)
    assert runner.restored is None and len(runner.service.projection().providers) == 3


async def test_history_trimmed_between_deliveries_leaves_snapshots_going_on_and_restoring(client: Client, tmp_path: Path) -> None:
    """Bounded history (runtime/bus.py) deletes a facet's older events, some before the runner is given them:
    the runner is still covered through the stream's end, keeps snapshotting, and its snapshot restores to
    what a full replay of the trimmed stream builds."""
    await ensure_streams(client.jetstream(), StreamSettings(history_per_facet=1))
    runner = Runner(SelectorService(), client, OFTEN)
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(runner.ready.wait(), 20)
        store = EventStore(client, producer="watcher")
        key = Key("InferenceProviderConfig", "", "p0")
        # one facet replaced far faster than the consumer folds it: most are trimmed before delivery
        await asyncio.gather(*(store.append(key.subject(), ResourceApplied(key.kind, "", "p0", n, IPC["spec"])) for n in range(1, 301)))
        await eventually(lambda: quiet(client, [runner]), timeout=30, message="caught up")
        info = await client.jetstream().stream_info(EVENTS_STREAM)
        assert info.state.first_seq > 1, "nothing was trimmed: the test would prove nothing"
        assert await runner.snapshot()
    finally:
        runner.stop()
        await asyncio.gather(task, return_exceptions=True)
    restored = await rebuilt("selector", client, FileSecrets(tmp_path), OFTEN)
    full = await rebuilt("selector", client, FileSecrets(tmp_path), NEVER)
    assert restored.restored is not None and restored.service.projection() == full.service.projection()


@dataclasses.dataclass
class HoldsASecretStore:
    secrets: FileSecrets


def test_what_is_not_a_projection_type_never_goes_into_a_snapshot(tmp_path: Path) -> None:
    codec = Codec(HoldsASecretStore(FileSecrets(tmp_path)))
    with pytest.raises(TypeError, match="cannot go into a snapshot"):
        codec.encode(HoldsASecretStore(FileSecrets(tmp_path)), runner="x", seq=1, covered={"*": 1}, seen={}, stream_created="")


def test_settings_come_from_the_environment_once_with_sane_defaults() -> None:
    assert SnapshotSettings.of(settings.load({}).snapshots) == SnapshotSettings(enabled=True, every_events=10_000, every_seconds=300.0)
    found = SnapshotSettings.of(
        settings.load({"JETWAY_SNAPSHOTS": "off", "JETWAY_SNAPSHOT_EVERY_EVENTS": "500", "JETWAY_SNAPSHOT_EVERY_SECONDS": "30"}).snapshots
    )
    assert found == SnapshotSettings(enabled=False, every_events=500, every_seconds=30.0)
    with pytest.raises(ValueError, match="JETWAY_SNAPSHOT_EVERY_EVENTS"):
        settings.load({"JETWAY_SNAPSHOT_EVERY_EVENTS": "lots"})
    with pytest.raises(ValueError, match="JETWAY_SNAPSHOTS"):
        settings.load({"JETWAY_SNAPSHOTS": "maybe"})


def test_the_nats_rights_name_the_buckets_the_runtime_uses() -> None:
    assert SNAPSHOT_BUCKET_PREFIX == BUCKET_PREFIX


def test_a_projection_reads_back_equal_from_its_snapshot_bytes() -> None:
    """Optional tagged unions, pydantic models, NamedTuple keys: what a deployment with no decision yet holds."""
    state = SelectorState()
    spec = {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}, "resources": {"gpu": {"count": 1}}}
    applied = ResourceApplied("ModelDeployment", "default", "qwen", 1, spec)
    state.fold(msgspec.structs.replace(new_envelope(QWEN.subject(), applied, producer="watcher"), seq=1))
    codec = Codec(state)
    data = codec.encode(state, runner="selector", seq=1, covered={"*": 1}, seen={QWEN.subject(): 1}, stream_created="")
    restored = SelectorState()
    codec.restore(codec.header(data), restored)
    assert restored == state and restored.deployments[QWEN].decision is None


async def test_a_shards_snapshot_plus_its_tail_is_what_a_full_replay_of_its_partition_builds(client: Client, tmp_path: Path) -> None:
    """A scaled-out service keeps one snapshot per partition (runtime/replica.py): whichever replica holds the
    partition next restores it and replays the partition's tail and the global one's."""
    store = EventStore(client, producer="watcher")
    keys = [Key("ModelDeployment", f"team-{n}", f"m{n}") for n in range(12)]
    partition = keys[0].partition
    mine = [k for k in keys if k.partition == partition]
    for key in keys:
        await store.append(key.subject(), ResourceApplied(key.kind, key.namespace, key.name, 1, MD["spec"]))
    await providers(client, 3)

    async def shard(settings: RunnerSettings) -> Runner:
        runner = Runner(SelectorService(), client, settings, partition=partition)
        await runner.rebuild()
        return runner

    first = await shard(OFTEN)
    assert set(first.service.projection().deployments) == set(mine) and len(first.service.projection().providers) == 3
    assert await first.snapshot()
    # the tail: the partition's events and the global ones (other partitions' are not this shard's)
    late = Key("ModelDeployment", mine[0].namespace, "late")
    await store.append(late.subject(), ResourceApplied(late.kind, late.namespace, late.name, 1, MD["spec"]))
    await store.append(mine[0].subject(), ResourceDeleted(mine[0].kind, mine[0].namespace, mine[0].name))
    await providers(client, 5)
    restored, full = await shard(OFTEN), await shard(NEVER)
    assert restored.restored is not None and set(restored.covered) == {partition, "g"}
    assert restored.replayed < full.replayed
    assert restored.service.projection() == full.service.projection()
    assert late in full.service.projection().deployments and mine[0] not in full.service.projection().deployments
    # the shard of another partition is not given this one's snapshot
    other = next(k.partition for k in keys if k.partition != partition)
    elsewhere = Runner(SelectorService(), client, OFTEN, partition=other)
    await elsewhere.rebuild()
    assert elsewhere.restored is None and not set(elsewhere.service.projection().deployments) & set(mine)
