"""A request's writes through the runner (`Writes`, runtime/reconcile.py), against a real nats-server: the watcher's
applies, deletes and cluster records go this way."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from contracts.events import Envelope, ResourceApplied
from contracts.subjects import SPEC, Key, facet_filter
from runtime.eventstore import Conflict, EventStore
from runtime.service import Runner, RunnerSettings, Service

KEY = Key("InferencePoolMember", "", "counted")


class Counter(Service):
    """Folds the generation last applied to KEY: what a write decides from."""

    name = "counter"
    consumes = (facet_filter(SPEC),)

    def __init__(self) -> None:
        self.generation = 0

    def fold(self, envelope: Envelope) -> None:
        if isinstance(envelope.event, ResourceApplied):
            self.generation = envelope.event.generation


def applied(generation: int) -> ResourceApplied:
    return ResourceApplied(kind=KEY.kind, namespace="", name=KEY.name, generation=generation, spec={"backend": "echo"})


async def generations(client: Client) -> list[int]:
    items = await EventStore(client, producer="test").read(KEY.subject(SPEC))
    return [i.event.generation for i in items if isinstance(i, Envelope) and isinstance(i.event, ResourceApplied)]


async def test_a_write_that_meets_another_writer_decides_again_from_what_that_writer_stored(client: Client) -> None:
    service = Counter()
    runner = Runner(service, client)
    other = EventStore(client, producer="another-replica")
    tries = 0

    async def next_generation() -> Envelope:
        nonlocal tries
        tries += 1
        decided = service.generation + 1  # decided from the projection as it is now
        if tries == 1:  # another replica records generation 1 between this decision and its append
            await other.append(KEY.subject(SPEC), applied(1), expected_seq=0)
        return await runner.writes.append(KEY.subject(SPEC), applied(decided))

    stored = await runner.writes.write(next_generation)

    assert tries == 2, "the conflict made the attempt run again"
    assert await generations(client) == [1, 2], "the stale decision (generation 1 twice) was not stored"
    assert service.generation == 2 and stored.seq == runner.seen[KEY.subject(SPEC)], "the write is folded at once"


async def test_concurrent_writes_are_serialised_so_each_decides_on_the_one_before(client: Client) -> None:
    service = Counter()
    runner = Runner(service, client)

    async def next_generation() -> Envelope:
        decided = service.generation + 1
        await asyncio.sleep(0)  # yield between deciding and appending: another write would interleave here without the lock
        return await runner.writes.append(KEY.subject(SPEC), applied(decided))

    await asyncio.gather(*(runner.writes.write(next_generation) for _ in range(5)))
    assert await generations(client) == [1, 2, 3, 4, 5]


async def test_a_write_that_keeps_conflicting_gives_up_with_the_conflict_after_its_tries(client: Client) -> None:
    service = Counter()
    runner = Runner(service, client, RunnerSettings(conflict_retries=3))
    other = EventStore(client, producer="another-replica")
    tries = 0

    async def always_beaten() -> Envelope:
        nonlocal tries
        tries += 1
        decided = service.generation + 1
        await other.append(KEY.subject(SPEC), applied(100 + tries))  # someone else always gets there first
        return await runner.writes.append(KEY.subject(SPEC), applied(decided))

    with pytest.raises(Conflict):
        await runner.writes.write(always_beaten)
    assert tries == 3
    assert await generations(client) == [101, 102, 103], "nothing of the beaten write was stored"
