"""Several replicas of the pipeline's services in one test process, each on a NATS connection of its own (as
separate pods), sharing the partitions through leases; and a way to kill one as a crash does: its connection
goes first, so it releases nothing and its leases are left to expire."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nats.aio.client import Client

from contracts.subjects import ALL_PARTITIONS
from runtime import settings as tree
from runtime.bus import connect
from runtime.entry import Context
from runtime.replica import Replica
from services import catalog
from tests.support.stack import SETTINGS


@dataclass
class Running:
    replica: Replica
    nc: Client
    task: asyncio.Task[None]


@dataclass
class Replicas:
    """service → its running replicas."""

    running: dict[str, list[Running]] = field(default_factory=dict)
    killed: list[Running] = field(default_factory=list)

    def of(self, service: str) -> list[Replica]:
        return [r.replica for r in self.running[service]]

    def shared(self, service: str) -> bool:
        """Every partition held by exactly one replica, each replica running a shard of each it holds."""
        held = [p for r in self.of(service) for p in r.leases.holds()]
        return sorted(held) == sorted(ALL_PARTITIONS) and all(set(r.shards) == r.leases.holds() for r in self.of(service))

    async def crash(self, service: str, index: int) -> Replica:
        """Kill one replica as a crash would: its connection goes at once, so it can neither act nor release
        anything, and its leases expire after the TTL (its tasks wind down in the background, unheard)."""
        running = self.running[service].pop(index)
        await running.nc.close()
        running.task.cancel()
        self.killed.append(running)
        return running.replica


@contextlib.asynccontextmanager
async def running_replicas(
    nats_url: str, count: int, *, ttl: float = 3.0, services: tuple[str, ...] = catalog.STANDALONE
) -> AsyncIterator[Replicas]:
    settings = dataclasses.replace(SETTINGS)
    found = Replicas()
    try:
        for name in services:
            found.running[name] = []
            for index in range(count):
                nc = await connect(nats_url, name=f"{name}-{index}")
                # as its process starts it (services/catalog.py), named and leased as JETWAY_REPLICA and JETWAY_LEASE_TTL_SECONDS say
                leases = tree.Leases(replica=f"{name}-{index}", ttl=ttl)
                [replica] = await catalog.start(Context(nc, None, tree.Settings(leases=leases), runner=settings), (name,))
                assert isinstance(replica, Replica)
                found.running[name].append(Running(replica, nc, asyncio.create_task(replica.run(), name=f"{name}-{index}")))
        for name in services:
            replicas = found.running[name]
            await asyncio.wait_for(asyncio.gather(*(r.replica.ready.wait() for r in replicas)), 60)
        yield found
    finally:
        everyone = [*(r for replicas in found.running.values() for r in replicas), *found.killed]
        for running in everyone:
            running.replica.stop()
        for running in everyone:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(running.task, 30)
            await running.nc.close()
