"""Two router replicas: each routes to every member, and each member's health is probed and recorded by the
replica holding its partition, once; when one replica dies, the other takes its partitions, records the health
of members applied after, and keeps routing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from contracts.conditions import same_decision
from contracts.events import Envelope
from contracts.router import MemberHealthChanged
from contracts.subjects import ALL_PARTITIONS, ROUTER, Key, kind_filter
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.leases import LeaseSettings
from runtime.secrets import FileSecrets
from services.router import main as router_main
from services.router import protocol
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.stack import SETTINGS, Stack, echo_member, running_stack

TTL = 8.0  # renewed every 2 s: a loaded machine starving one renewal must not move a partition mid-test


@contextlib.asynccontextmanager
async def router_replica(url: str, name: str, directory: Path) -> AsyncIterator[tuple[router_main.Router, str, Any]]:
    nc = await connect(url, name=name)
    router = router_main.build(
        nc, FileSecrets(directory / "secrets"), probe_interval=0.5, settings=SETTINGS, leases=LeaseSettings(TTL), replica=name
    )
    task = asyncio.create_task(router.runner.run())
    server, port = await protocol.serve(router.routes, "127.0.0.1", 0)
    try:
        await asyncio.wait_for(router.runner.ready.wait(), 20)
        yield router, f"http://127.0.0.1:{port}/v1", (nc, task)
    finally:
        server.close()
        router.runner.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 20)
        router.routes.pool.close()
        await nc.close()


async def chat(base: str, model: str) -> int:
    async with aiohttp.ClientSession() as http:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(f"{base}/chat/completions", json=body) as response:
            return response.status


async def health_records(url: str) -> dict[str, list[MemberHealthChanged]]:
    nc = await connect(url, name="observer")
    try:
        items = await EventStore(nc, producer="test").read(kind_filter("InferencePoolMember", ROUTER))
    finally:
        await nc.close()
    found: dict[str, list[MemberHealthChanged]] = {}
    for item in items:
        if isinstance(item, Envelope) and isinstance(item.event, MemberHealthChanged):
            found.setdefault(item.key.name, []).append(item.event)
    return found


async def test_router_replicas_share_the_probing_and_one_takes_over_when_the_other_dies(nats: NatsEndpoint, tmp_path: Path) -> None:
    # the stack's own router is not part of this: its service would probe every member as a third, lease-less one
    async with running_stack(nats.url, tmp_path, probe_interval=3600.0) as stack:
        stack.router.runner.stop()
        async with (
            router_replica(nats.url, "a", tmp_path) as (a, a_url, (a_nc, a_task)),
            router_replica(nats.url, "b", tmp_path) as (
                b,
                b_url,
                _,
            ),
        ):
            leases = [a.service.leases, b.service.leases]
            assert leases[0] is not None and leases[1] is not None

            def shared() -> bool:
                held = sorted(p for lease in leases if lease is not None for p in lease.holds())
                return held == sorted(ALL_PARTITIONS) and all(lease is not None and lease.holds() for lease in leases)

            await eventually(shared, timeout=30, message="the partitions shared between the two routers")
            names = [f"m{i}" for i in range(12)]
            for name in names:
                assert (await stack.apply(echo_member(name)))[0] == 201
            owners = {name: ("a" if leases[0].valid(Key("InferencePoolMember", "", name).partition) else "b") for name in names}
            assert set(owners.values()) == {"a", "b"}, "every member in one router's partitions: the test would prove less"
            for base in (a_url, b_url):
                for name in names:
                    await eventually(lambda n=name, u=base: served(u, n), timeout=15, message=f"{name} routed by {base}")
                    assert await chat(base, name) == 200
            records = await health_records(nats.url)
            assert {n: len(r) for n, r in records.items()} == {n: 1 for n in names}  # recorded once, by its partition's holder

            # a dies: b takes its partitions and records what a would have
            await a_nc.close()
            a_task.cancel()
            await eventually(lambda: leases[1].holds() == set(ALL_PARTITIONS), timeout=60, message="b holds every partition")
            late = [f"late{i}" for i in range(6)]
            for name in late:
                assert (await stack.apply(echo_member(name)))[0] == 201
            for name in late:
                await eventually(lambda n=name: served(b_url, n), timeout=15, message=f"{name} probed by b and routed")
                assert await chat(b_url, name) == 200
            assert await chat(b_url, names[0]) == 200
            records = await health_records(nats.url)
            assert all(len(records[n]) == 1 and records[n][0].healthy for n in [*names, *late])
            assert not any(same_decision(r[i], r[i - 1]) for r in records.values() for i in range(1, len(r)))
            await assert_status_healthy(stack, late)


async def served(base: str, model: str) -> bool:
    async with aiohttp.ClientSession() as http, http.get(f"{base}/models") as response:
        return any(m["id"] == model for m in (await response.json())["data"])


async def assert_status_healthy(stack: Stack, names: list[str]) -> None:
    for name in names:

        async def healthy(n: str = name) -> bool:  # the watcher's status follows the records through the stream
            condition = await stack.condition(n, "Healthy")
            return condition is not None and condition["status"] == "True"

        await eventually(healthy, timeout=15, message=f"{name} Healthy in its status")
