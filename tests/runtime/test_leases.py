"""Leases (runtime/leases.py): the decisions about shares, pure; then replicas on a real NATS server sharing
partitions, never two holding one at once, a dead replica's partitions taken over within the TTL, and a
stopping one's at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import pytest
from nats.aio.client import Client

from contracts.natsauth import LEASE_BUCKET
from contracts.subjects import ALL_PARTITIONS
from runtime import settings
from runtime.bus import connect
from runtime.leases import BUCKET, MARGIN, Leases, LeaseSettings, View, balanced, fair_share, plan, preference
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint

PARTS = tuple(ALL_PARTITIONS)
Hook = Callable[[str], Awaitable[None]]
TTL = 2.0


def test_the_fair_share_rounds_up_so_every_partition_has_a_place() -> None:
    assert fair_share(17, 1) == 17 and fair_share(17, 2) == 9 and fair_share(17, 3) == 6 and fair_share(17, 0) == 17
    assert all(fair_share(17, n) * n >= 17 for n in range(1, 20))


def test_a_lone_replica_takes_every_free_partition_in_its_own_order() -> None:
    release, take = plan(View(), "a", [], PARTS)
    assert release == [] and sorted(take) == sorted(PARTS)
    assert take == sorted(PARTS, key=lambda p: preference("a", p), reverse=True)
    assert take != sorted(PARTS, key=lambda p: preference("b", p), reverse=True)  # each replica its own order


def test_a_replica_over_its_share_releases_the_excess_and_takes_nothing() -> None:
    holders = {p: ("a", 1) for p in PARTS}
    release, take = plan(View(holders, frozenset({"a", "b"})), "a", PARTS, PARTS)
    assert len(release) == 17 - 9 and take == []


def test_a_replica_under_its_share_takes_only_free_partitions_up_to_it() -> None:
    holders = {p: ("a", 1) for p in PARTS[:12]}
    release, take = plan(View(holders, frozenset({"a", "b"})), "b", [], PARTS)
    assert release == [] and sorted(take) == sorted(PARTS[12:])  # 5 free, under b's share of 9
    holders = {p: ("a", 1) for p in PARTS[:3]}
    _, take = plan(View(holders, frozenset({"a", "b"})), "b", [], PARTS)
    assert len(take) == 9 and not set(take) & set(PARTS[:3])


def test_the_group_is_settled_when_every_partition_is_held_and_none_over_a_share() -> None:
    everything = {p: ("a", 1) for p in PARTS}
    assert balanced(View(everything, frozenset({"a"})), "a", set(PARTS), PARTS)
    # b has just joined: a is over its share, so b is not settled with nothing (nor is a)
    assert not balanced(View(everything, frozenset({"a", "b"})), "b", set(), PARTS)
    assert not balanced(View(everything, frozenset({"a", "b"})), "a", set(PARTS), PARTS)
    halves = {p: ("a" if i < 9 else "b", 1) for i, p in enumerate(PARTS)}
    assert balanced(View(halves, frozenset({"a", "b"})), "b", {p for p, (h, _) in halves.items() if h == "b"}, PARTS)
    assert not balanced(View(dict(list(halves.items())[:16]), frozenset({"a", "b"})), "a", set(PARTS[:9]), PARTS)  # one free


def test_its_own_lease_from_before_a_restart_is_taken_back() -> None:
    holders = {"g": ("a", 7), "3": ("b", 8)}
    _, take = plan(View(holders, frozenset({"a", "b"})), "a", [], PARTS)
    assert "g" in take and "3" not in take


def test_the_ttl_comes_from_the_environment_within_bounds() -> None:
    assert LeaseSettings.of(settings.load({}).leases).ttl == 10.0
    assert LeaseSettings.of(settings.load({"JETWAY_LEASE_TTL_SECONDS": "4"}).leases).ttl == 4.0
    for bad in ("0", "lots", "601"):
        with pytest.raises(ValueError, match="JETWAY_LEASE_TTL_SECONDS must be a number of seconds from 1 to 600"):
            settings.load({"JETWAY_LEASE_TTL_SECONDS": bad})


class Ledger:
    """Who holds what, as the duties see it: a partition gained while another replica still runs it fails the test."""

    def __init__(self) -> None:
        self.holder: dict[str, str] = {}
        self.overlaps: list[tuple[str, str, str]] = []
        self.gained: dict[str, float] = {}
        self.gains: list[tuple[str, str, float]] = []  # (partition, replica, when), every one
        self.losses: list[tuple[str, str, float]] = []

    def hooks(self, name: str) -> dict[str, object]:
        async def gain(partition: str) -> None:
            if partition in self.holder:
                self.overlaps.append((partition, self.holder[partition], name))
            self.holder[partition] = name
            self.gained[partition] = time.monotonic()
            self.gains.append((partition, name, self.gained[partition]))

        async def lose(partition: str) -> None:
            self.losses.append((partition, name, time.monotonic()))
            if self.holder.get(partition) == name:
                del self.holder[partition]

        return {"on_gain": gain, "on_loss": lose}


@contextlib.asynccontextmanager
async def replica(url: str, name: str, ledger: Ledger) -> AsyncIterator[tuple[Leases, Client, asyncio.Task[None]]]:
    nc = await connect(url, name=name)
    leases = Leases(nc.jetstream(timeout=2), "test", PARTS, replica=name, settings=LeaseSettings(TTL), **ledger.hooks(name))  # type: ignore[arg-type]
    task = asyncio.create_task(leases.run())
    try:
        yield leases, nc, task
    finally:
        leases.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 10)
        with contextlib.suppress(Exception):
            await nc.close()


def shared_by(ledger: Ledger, names: set[str]) -> bool:
    counts = [sum(1 for h in ledger.holder.values() if h == n) for n in names]
    return len(ledger.holder) == len(PARTS) and set(ledger.holder.values()) == names and max(counts) - min(counts) <= 1


async def test_replicas_share_the_partitions_and_a_dead_ones_are_taken_within_the_ttl(nats: NatsEndpoint) -> None:
    ledger = Ledger()
    async with replica(nats.url, "a", ledger), replica(nats.url, "b", ledger) as (_, b_nc, b_task):
        await eventually(lambda: shared_by(ledger, {"a", "b"}), timeout=15, message="two replicas share the partitions")
        async with replica(nats.url, "c", ledger):
            await eventually(lambda: shared_by(ledger, {"a", "b", "c"}), timeout=15, message="a third replica gets its share")
            held_by_b = {p for p, h in ledger.holder.items() if h == "b"}
            # b dies: its connection goes first, so nothing is released and its keys are left to expire
            await b_nc.close()
            b_task.cancel()
            with contextlib.suppress(BaseException):
                await b_task
            died = time.monotonic()
            await eventually(lambda: shared_by(ledger, {"a", "c"}), timeout=15, message="the survivors took b's partitions")
            # not before b's keys could expire: a lease is never taken from a replica that may still act on it
            assert min(ledger.gained[p] for p in held_by_b) - died >= TTL * (1 - MARGIN) - 0.5
    assert ledger.overlaps == []


async def test_every_read_of_the_group_sees_every_key(nats: NatsEndpoint) -> None:
    """A read once came back empty whenever the server had pushed every key before the client asked how many were
    left (a fifth of the reads on an idle server), and a survivor then took over in stages, up to TTL + 24 s."""
    ledger = Ledger()
    async with replica(nats.url, "a", ledger) as (a, _, _), replica(nats.url, "b", ledger):
        await eventually(lambda: shared_by(ledger, {"a", "b"}), timeout=15, message="shared")
        for _ in range(100):
            view = await a.read()
            assert (len(view.holders), view.replicas) == (len(PARTS), frozenset({"a", "b"}))


async def test_a_read_sees_the_keys_a_replica_renews_while_it_reads(nats: NatsEndpoint) -> None:
    """Renewals landing mid-read replace a replica's keys by newer ones. A read that trusted an ordered consumer's
    pending count missed that replica whole (the count lost the replaced messages and never gained the new ones),
    and CI saw a survivor take more than its share and give it back. Here a replica renews without pause."""
    ledger = Ledger()
    async with replica(nats.url, "a", ledger) as (a, nc, _), replica(nats.url, "b", ledger):
        await eventually(lambda: shared_by(ledger, {"a", "b"}), timeout=15, message="shared")
        kv = await nc.jetstream().key_value(BUCKET)
        b_keys = [a.key(p) for p, h in ledger.holder.items() if h == "b"]
        stop = asyncio.Event()

        async def renew_b_without_pause() -> None:  # as b's renewals do, but always in flight
            while not stop.is_set():
                await asyncio.gather(kv.put("test.replica.b", b""), *(kv.put(key, b"b") for key in b_keys))

        renewing = asyncio.create_task(renew_b_without_pause())
        try:
            missed = []
            for _ in range(50):
                view = await a.read()
                if (len(view.holders), view.replicas) != (len(PARTS), frozenset({"a", "b"})):
                    missed.append((len(view.holders), sorted(view.replicas)))
            assert missed == []
        finally:
            stop.set()
            await renewing


async def test_a_dead_replicas_partitions_move_once_each_to_the_survivors(nats: NatsEndpoint) -> None:
    ledger = Ledger()
    async with replica(nats.url, "a", ledger), replica(nats.url, "b", ledger) as (_, b_nc, b_task), replica(nats.url, "c", ledger):
        await eventually(lambda: shared_by(ledger, {"a", "b", "c"}), timeout=15, message="shared by three")
        held_by_b = {p for p, h in ledger.holder.items() if h == "b"}
        await b_nc.close()  # b dies without releasing anything
        b_task.cancel()
        with contextlib.suppress(BaseException):
            await b_task
        died = time.monotonic()
        await eventually(lambda: shared_by(ledger, {"a", "c"}), timeout=15, message="the survivors took b's partitions")
        # each of b's partitions changed hands once, straight to a survivor with room for it: none taken in excess
        # and released again, and the survivors kept what they had
        after = [(p, who) for p, who, when in ledger.gains if when > died]
        assert sorted(p for p, _ in after) == sorted(held_by_b), after
        assert [(p, who) for p, who, when in ledger.losses if when > died and who != "b"] == []
        back = max(ledger.gained[p] for p in held_by_b) - died
        print(f"b's {len(held_by_b)} partitions held again {back:.1f} s after it died (TTL {TTL} s)")
    assert ledger.overlaps == []


async def test_a_renewal_whose_answer_was_lost_is_known_as_its_own(nats: NatsEndpoint) -> None:
    """A renewal that reached the bucket but whose reply was lost (a NATS node lost mid-request) moved the key's
    revision; the next renewal is refused for it, and the replica once gave up its own lease, leaving the
    partition without a holder for a TTL. The key still names it, so it keeps the lease."""
    ledger = Ledger()
    async with replica(nats.url, "a", ledger) as (a, nc, _):
        await eventually(lambda: len(ledger.holder) == len(PARTS), timeout=15, message="a holds everything")
        partition = PARTS[0]
        kv = await nc.jetstream().key_value(BUCKET)
        entry = await kv.get(a.key(partition))
        await kv.update(a.key(partition), b"a", last=entry.revision)  # a's renewal, landed, its answer lost
        ticks = a.ticks
        await eventually(lambda: a.ticks >= ticks + 2, timeout=15, message="two more ticks")
        assert a.valid(partition) and ledger.holder.get(partition) == "a"
        assert ledger.losses == []


async def test_a_replica_that_stops_hands_its_partitions_over_at_once(nats: NatsEndpoint) -> None:
    ledger = Ledger()
    async with replica(nats.url, "a", ledger) as (a, _, _), replica(nats.url, "b", ledger) as (b, _, b_task):
        await eventually(lambda: shared_by(ledger, {"a", "b"}), timeout=15, message="shared")
        b.stop()
        await asyncio.wait_for(b_task, 15)
        # released, not left to expire: once b has stopped, no key names it any more
        view = await a.read()
        assert "b" not in {holder for holder, _ in view.holders.values()} and "b" not in view.replicas
        await eventually(lambda: shared_by(ledger, {"a"}), timeout=15, message="a holds everything")
    assert ledger.overlaps == []


async def test_a_stopping_replicas_leases_are_renewed_while_its_duties_wind_down(nats: NatsEndpoint) -> None:
    """A duty that takes longer than the TTL to stop (a shard finishing its batch) keeps its lease meanwhile: no other
    replica takes the partition before the duty ended (once, nothing renewed a stopping replica's leases, and the
    keys expired under duties still running)."""
    ledger = Ledger()
    wound_down = asyncio.Event()
    hooks = ledger.hooks("a")
    gain, lose = cast(Hook, hooks["on_gain"]), cast(Hook, hooks["on_loss"])

    async def slow_loss(partition: str) -> None:
        await wound_down.wait()
        await lose(partition)

    nc = await connect(nats.url, name="a")
    a = Leases(nc.jetstream(timeout=2), "test", PARTS, replica="a", settings=LeaseSettings(TTL), on_gain=gain, on_loss=slow_loss)
    a_task = asyncio.create_task(a.run())
    try:
        await eventually(lambda: len(ledger.holder) == len(PARTS), timeout=15, message="a holds everything")
        a.stop()
        async with replica(nats.url, "b", ledger) as (b, _, _):
            # b ticks every TTL / 4: eight ticks are two TTLs, time for a's keys to expire were they not renewed
            await eventually(lambda: b.ticks >= 8, timeout=30, message="b ticked for two TTLs")
            assert set(ledger.holder.values()) == {"a"} and b.holds() == set()
            wound_down.set()
            await asyncio.wait_for(a_task, 15)
            await eventually(lambda: shared_by(ledger, {"b"}), timeout=15, message="b took everything once a's duties ended")
    finally:
        wound_down.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(a_task, 10)
        await nc.close()
    assert ledger.overlaps == []


async def test_a_replica_cut_off_from_nats_stops_acting_before_its_leases_can_be_taken(nats: NatsEndpoint) -> None:
    ledger = Ledger()
    async with replica(nats.url, "a", ledger) as (a, a_nc, a_task), replica(nats.url, "b", ledger):
        await eventually(lambda: shared_by(ledger, {"a", "b"}), timeout=15, message="shared")
        mine = {p for p, h in ledger.holder.items() if h == "a"}
        await a_nc.close()  # NATS out of reach: renewals fail, and a's loop keeps trying
        # holds() turns false at once; each duty's on_loss runs as its own task a moment later, so wait for both
        await eventually(
            lambda: not a.holds() and not any(ledger.holder.get(p) == "a" for p in mine),
            timeout=15,  # safety is the ledger's overlaps, checked below; this only bounds the wait
            message="a no longer holds nor acts on its partitions",
        )
        assert not a_task.done()
        await eventually(lambda: all(ledger.holder.get(p) == "b" for p in mine), timeout=15, message="b took them")
    assert ledger.overlaps == []


def test_the_nats_rights_name_the_bucket_the_runtime_uses() -> None:
    assert LEASE_BUCKET == BUCKET
