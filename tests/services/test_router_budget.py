"""Client keys' limits shared by router replicas (services/router/budget.py): the ledger's pure decision, then
three replicas' limiters on a real NATS server, one of them killed holding a slice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from runtime.bus import connect
from services.router import budget
from services.router.budget import Ledger, Report, SharedLimiter, settle, share, wait, window
from services.router.keys import ClientKey, KeyRing, hash_key, new_key
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint

KEY = ClientKey("team-a", hash_key(new_key()), rpm=10, tpm=1000)


def test_grants_never_take_a_window_past_rpm_whoever_asks() -> None:
    ledger, granted = Ledger(), []
    for replica in ("a", "b", "c", "a", "b", "c"):
        ledger, n = settle(ledger, KEY, Report(replica, 100, 3, now=100))
        granted.append(n)
    assert granted == [3, 3, 3, 1, 0, 0]
    assert window(ledger, 100).requests == 10 and set(ledger.replicas) == {"a", "b", "c"}
    assert wait(ledger, KEY, 100) == 61  # room again once second 100 has left the window


def test_a_second_leaving_the_window_gives_its_requests_back() -> None:
    ledger, _ = settle(Ledger(), KEY, Report("a", 100, 10, now=100))
    assert settle(ledger, KEY, Report("b", 160, 5, now=160))[1] == 0  # second 100 still counts at 160
    later, granted = settle(ledger, KEY, Report("b", 161, 5, now=161))
    assert granted == 5 and 100 not in later.requests  # and the ledger forgets it


def test_what_a_slice_left_unused_is_given_back_and_granted_again() -> None:
    ledger, _ = settle(Ledger(), KEY, Report("a", 100, 10, now=100))
    ledger, granted = settle(ledger, KEY, Report("a", 101, 4, given_back={100: 6}, now=101))
    assert granted == 4 and window(ledger, 101).requests == 8
    ledger, granted = settle(ledger, KEY, Report("b", 101, 5, given_back={40: 3}, now=101))  # a second long gone: nothing
    assert granted == 2


def test_no_request_is_granted_while_the_tokens_of_the_window_are_spent() -> None:
    ledger, granted = settle(Ledger(), KEY, Report("a", 100, 1, spent={99: 600}, now=100))
    assert granted == 1
    ledger, granted = settle(ledger, KEY, Report("b", 100, 1, spent={100: 400}, now=100))
    assert granted == 0 and window(ledger, 100).tokens == 1000
    assert wait(ledger, KEY, 100) == 60  # second 99's 600 tokens leave the window at 160


def test_a_key_without_limits_is_granted_what_it_asks() -> None:
    assert settle(Ledger(), ClientKey("free", KEY.sha256), Report("a", 100, 500, now=100))[1] == 500


def test_cut_off_from_the_ledger_a_replica_allows_an_equal_share() -> None:
    assert (share(KEY, 3).rpm, share(KEY, 3).tpm) == (3, 333)
    assert share(ClientKey("tiny", KEY.sha256, rpm=2), 5).rpm == 1  # never nothing
    assert share(KEY, 0).rpm == 10


# --- real NATS


@dataclass
class Replica:
    nc: Client
    limiter: SharedLimiter
    task: asyncio.Task[None]


@contextlib.asynccontextmanager
async def replicas(url: str, count: int, ring: KeyRing) -> AsyncIterator[list[Replica]]:
    running = []
    for i in range(count):
        nc = await connect(url, name=f"router-{i}")
        limiter = SharedLimiter(nc.jetstream(timeout=budget.LEDGER_TIMEOUT), f"router-{i}")
        running.append(Replica(nc, limiter, asyncio.create_task(limiter.run(lambda: ring))))
    try:
        yield running
    finally:
        for replica in running:
            replica.limiter.stop()
            replica.task.cancel()
            with contextlib.suppress(BaseException):
                await replica.task
            await replica.nc.close()


async def ask(limiter: SharedLimiter, key: ClientKey) -> bool:
    verdict = limiter.admit(key, 0.0)
    if verdict is None:
        verdict = await limiter.claim(key, 0.0)
    return verdict.ok


async def test_three_replicas_admit_exactly_the_rpm_and_one_killed_holding_a_slice_adds_none(nats: NatsEndpoint) -> None:
    key = ClientKey("team-a", KEY.sha256, rpm=60)
    ring = KeyRing((key,))
    async with replicas(nats.url, 3, ring) as (a, b, c):
        admitted = {"a": 0, "b": 0, "c": 0}

        async def client(replica: Replica, name: str, until: asyncio.Event) -> None:
            while not until.is_set():
                if await ask(replica.limiter, key):
                    admitted[name] += 1
                await asyncio.sleep(0.005)  # a client's pace (not a wait on a condition): ~150 requests/s a replica

        killed = asyncio.Event()
        # all three from the start: a replica alone doubles its slice each claim, and once took the whole minute's
        # budget before the other two had claimed (they then admitted nothing, rightly)
        everyone = [asyncio.create_task(client(r, n, killed)) for r, n in ((a, "a"), (b, "b"), (c, "c"))]
        await eventually(
            lambda: sum(admitted.values()) >= 30 and all(admitted.values()), timeout=20, message="half the minute admitted, by all three"
        )
        # a crashes: its connection goes first, it gives nothing back and reports nothing
        killed.set()
        await asyncio.gather(*everyone)
        await a.nc.close()
        a.limiter.stop()
        left_with_a = sum(n for n in a.limiter._budgets[key.name].slices.values() if n > 0)
        done = asyncio.Event()
        rest = [asyncio.create_task(client(r, n, done)) for r, n in ((b, "b"), (c, "c"))]
        await eventually(lambda: sum(admitted.values()) >= 60 - left_with_a, timeout=20, message="the rest of the minute admitted")
        # keep asking for two more ticks: nothing more may come
        second = int(b.limiter.clock())
        await eventually(lambda: int(b.limiter.clock()) >= second + 2, timeout=5, message="two more seconds")
        done.set()
        await asyncio.gather(*rest)
    total = sum(admitted.values())
    assert 60 - left_with_a <= total <= 60, (admitted, left_with_a)
    assert admitted["b"] and admitted["c"]


async def test_tokens_spent_through_one_replica_close_the_key_on_the_others(nats: NatsEndpoint) -> None:
    key = ClientKey("team-a", KEY.sha256, tpm=100)
    ring = KeyRing((key,))
    async with replicas(nats.url, 2, ring) as (a, b):
        assert await ask(a.limiter, key) and await ask(b.limiter, key)
        a.limiter.spend(key, 150, 0.0)  # one long answer: over the limit, as one replica allows too

        async def closed() -> bool:  # a's next tick reports the tokens; b's next tick reads them
            return not await ask(b.limiter, key)

        await eventually(closed, timeout=10, interval=0.1, message="b refusing the key once a reported its tokens")
        refused = b.limiter.admit(key, 0.0)
        assert refused is not None and not refused.ok and refused.limit == "tpm" and refused.retry_after > 50


async def test_a_replica_cut_off_from_nats_allows_its_share_and_says_so(nats: NatsEndpoint) -> None:
    key = ClientKey("team-a", KEY.sha256, rpm=30)
    async with replicas(nats.url, 3, KeyRing((key,))) as (a, b, c):
        for replica in (a, b, c):  # each writes once: the ledger knows three replicas
            assert await ask(replica.limiter, key)
        await eventually(lambda: a.limiter._budgets[key.name].replicas == 3, timeout=10, message="a's tick saw three replicas")
        await a.nc.close()
        results = [await ask(a.limiter, key) for _ in range(30)]
    assert a.limiter.degraded
    # cut off, it admits 30 / 3 in the minute on its own count; beside those, only what its slices held, which the
    # ledger had granted it before the cut (counted there for every replica)
    alone = a.limiter.fallback._usage[key.name].requests
    assert alone == 10 and results.count(True) >= 10, (results, alone)


async def test_a_grant_answered_after_the_request_stopped_waiting_is_still_the_replicas_to_use(
    nats: NatsEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger's answer later than a request waits (CLAIM_TIMEOUT, a loaded machine): the request goes on with the
    replica's share, and the compare-and-set, which had landed, still puts its grant in the replica's slice. Cut off
    instead, it granted requests no slice held: a full run's survivors stopped 5 short of the key's rpm."""
    key = ClientKey("team-a", hash_key(new_key()), rpm=60)
    late = asyncio.Event()

    def answered_late(write: Any) -> Any:
        async def written(self: KeyValue, *args: Any, **kwargs: Any) -> Any:
            revision = await write(self, *args, **kwargs)  # landed in the ledger
            if not late.is_set():
                late.set()
                await asyncio.sleep(budget.CLAIM_TIMEOUT + 0.5)  # its answer on the way back, past the request's wait
            return revision

        return written

    monkeypatch.setattr(KeyValue, "create", answered_late(KeyValue.create))
    nc = await connect(nats.url, name="router-0")
    try:
        limiter = SharedLimiter(nc.jetstream(timeout=budget.LEDGER_TIMEOUT), "router-0")
        verdict = await limiter.claim(key, 0.0)
        assert verdict.ok and limiter.degraded  # admitted by its share while the ledger was late
        kv = await nc.jetstream().key_value(budget.BUCKET)

        async def held_as_granted() -> bool:
            ledger = msgspec.json.decode((await kv.get(key.name)).value or b"{}", type=Ledger)
            mine = limiter._budgets[key.name]
            return sum(ledger.requests.values()) == sum(mine.slices.values()) + sum(mine.used.values()) > 0

        await eventually(held_as_granted, timeout=10, message="the late grant in the replica's slice")
    finally:
        await nc.close()
