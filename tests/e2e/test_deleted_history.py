"""A deleted resource's history is purged after the grace period (runtime/bus.py, the watcher does it), once
nothing stands for it: a live resource keeps its history, a deleted one whose owner still holds objects keeps
it until they are withdrawn, and a resource of the same name applied after the purge starts afresh."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.events import Envelope, Withdrawn
from contracts.pipeline import WorkloadRendered
from contracts.subjects import WORKLOAD, Key
from runtime import settings
from runtime.bus import StreamSettings, connect
from runtime.eventstore import EventStore
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.nats import NatsEndpoint
from tests.support.stack import SETTINGS, Stack, echo_member, running_stack

DELETED_GRACE_ENV = "JETWAY_DELETED_HISTORY_SECONDS"

GRACE = 3.0  # long enough for the read just after the delete to come first on a loaded machine
QUICK = dataclasses.replace(SETTINGS, streams=StreamSettings(deleted_grace=GRACE))


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, settings=QUICK) as running:
        yield running


async def history(stack: Stack, key: Key) -> list[Envelope]:
    nc = await connect(stack.nats_url, name="observer")
    try:
        return [i for i in await EventStore(nc, producer="test").history(key) if isinstance(i, Envelope)]
    finally:
        await nc.close()


async def test_a_deleted_resources_history_goes_after_the_grace_and_a_live_ones_stays(stack: Stack) -> None:
    gone, kept = Key("InferencePoolMember", "", "gone"), Key("InferencePoolMember", "", "kept")
    for name in ("gone", "kept"):
        assert (await stack.apply(echo_member(name)))[0] == 201
    await eventually(lambda: stack.served(gone.name), message="the members probed")
    assert (await stack.delete("/v1/kinds/ipm/gone"))[0] == 200
    assert await history(stack, gone)  # kept for the grace period

    async def purged() -> bool:
        return await history(stack, gone) == []

    await eventually(purged, timeout=30, message="the deleted member's history purged")
    assert next(e.type for e in await history(stack, kept)) == "ResourceApplied.v1"
    # the same name applied again after its history went: a new resource, from generation 1
    status, body = await stack.apply(echo_member("gone"))
    assert status == 201 and body["generation"] == 1, body
    await eventually(lambda: stack.served(gone.name), message="the new member probed and routed")


async def test_a_deleted_resource_that_still_holds_objects_keeps_its_history_until_they_are_withdrawn(stack: Stack) -> None:
    md = Key("ModelDeployment", "default", "held")
    assert (await stack.apply(changed(MD, {"metadata.name": "held"})))[0] == 201
    nc = await connect(stack.nats_url, name="workload")  # as the workload service records what it wrote
    try:
        store = EventStore(nc, producer="workload")
        objects = ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "held", "namespace": "default"}},)
        rendered = await store.append(
            md.subject(WORKLOAD), WorkloadRendered(generation=1, provider="vllm", objects=objects), expected_seq=0
        )
        assert (await stack.delete("/v1/kinds/md/held"))[0] == 200
        watcher = stack.watcher.service
        assert await watcher.purge_deleted(stack.watcher.runner, 0.0) == []  # its Deployment still stands
        assert await history(stack, md)
        await store.append(md.subject(WORKLOAD), Withdrawn(generation=1), expected_seq=rendered.seq)

        async def purged() -> bool:
            return await history(stack, md) == []

        await eventually(purged, timeout=30, message="purged once withdrawn")
    finally:
        await nc.close()


def test_the_grace_is_read_from_the_environment() -> None:
    assert StreamSettings.of(settings.load({}).streams).deleted_grace == 7 * 24 * 3600
    assert StreamSettings.of(settings.load({DELETED_GRACE_ENV: "3600"}).streams).deleted_grace == 3600
    assert StreamSettings.of(settings.load({DELETED_GRACE_ENV: "forever"}).streams).deleted_grace == 0
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValueError, match=DELETED_GRACE_ENV):
            settings.load({DELETED_GRACE_ENV: bad})
