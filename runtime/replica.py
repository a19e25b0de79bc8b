"""A replica of a scaled-out service: one shard (a `Runner` of one partition) per partition it holds.

Resources are spread over `contracts.subjects.ALL_PARTITIONS`: the cluster-wide `g` and sixteen
namespace hashes. The replicas of a service share them through leases (runtime/leases.py): each holds
about `partitions / replicas` of them, and runs, for each, a shard with a projection of its own,
rebuilt from that partition's snapshot and events (and the global ones, which every shard folds), that
decides only about that partition's resources. The shard of `g` decides about the cluster-wide ones (a
provider's rules, a framework's readiness).

When a replica dies its leases expire after the TTL and the others take its partitions: each new shard
rebuilds and runs a level-triggered pass over its resources, so whatever the dead replica left half
done is done. When a replica joins, the others release what is above their share; a shard is stopped
before its lease is released, so no two replicas decide about one partition at once (and the facets'
expected-sequence guard refuses a decision of one that did).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any

from nats.aio.client import Client

from contracts.subjects import ALL_PARTITIONS, Key
from runtime.leases import Leases, LeaseSettings
from runtime.service import Runner, RunnerSettings, Service
from runtime.tasks import cancel_and_wait

log = logging.getLogger("jetway.replica")


class Replica:
    """Runs the shards of one service whose partitions this replica holds (the module's docstring).

    `make` builds a fresh service (its projection empty) for each shard. Looks like a `Runner` to whoever
    runs it: `name`, `ready` (set once the leases settled and every shard held is running), `run`, `stop`."""

    def __init__(
        self,
        name: str,
        make: Callable[[], Service],
        nc: Client,
        settings: RunnerSettings | None = None,
        *,
        replica: str | None = None,
        leases: LeaseSettings | None = None,
        partitions: Iterable[str] = ALL_PARTITIONS,
        stop_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.make = make
        self.nc = nc
        self.settings = settings or RunnerSettings()
        self.stop_timeout = stop_timeout
        self.ready = asyncio.Event()
        self.shards: dict[str, Runner] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.failed: BaseException | None = None
        self._failure = asyncio.Event()
        self._changed = asyncio.Event()  # a shard started or stopped
        self.leases = Leases(
            nc.jetstream(timeout=5),
            name,
            partitions,
            replica=replica,
            settings=leases,
            on_gain=self._gain,
            on_loss=self._lose,
        )

    @property
    def replica(self) -> str:
        return self.leases.replica

    def shard_of(self, key: Key) -> Runner | None:
        return self.shards.get(key.partition)

    def services(self) -> list[Any]:
        return [shard.service for shard in self.shards.values()]

    async def _gain(self, partition: str) -> None:
        runner = Runner(self.make(), self.nc, self.settings, partition=partition, valid=lambda: self.leases.valid(partition))
        self.shards[partition] = runner
        self.ready.clear()
        self._changed.set()
        task = asyncio.create_task(runner.run(), name=f"{runner.name}@{self.replica}")
        self._tasks[partition] = task
        task.add_done_callback(functools.partial(self._ended, partition))

    def _ended(self, partition: str, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        if self._tasks.get(partition) is not task:  # ended while being stopped (`_lose`): how its stop went is no failure
            log.info("shard %s of %s stopped on %r", partition, self.name, task.exception(), extra={"service": self.name})
            return
        # a shard that cannot run (NATS gone for good, a bug) takes the replica down: a half-running
        # service is worse than none, and its leases then go to a replica that can
        self.failed = task.exception()
        log.error("shard %s of %s failed: %s", partition, self.name, self.failed, extra={"service": self.name})
        self._failure.set()

    async def _lose(self, partition: str) -> None:
        runner = self.shards.pop(partition, None)
        task = self._tasks.pop(partition, None)
        self._changed.set()
        if runner is None or task is None:
            return
        runner.stop()
        try:
            await asyncio.wait_for(asyncio.shield(task), self.stop_timeout)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(asyncio.CancelledError):
                await cancel_and_wait(task)  # again and again: nats-py can lose a cancellation (runtime/tasks.py)
        except Exception:
            pass  # its failure was reported when it ended
        log.info("shard %s of %s stopped", partition, self.name, extra={"service": self.name})

    async def _watch_ready(self) -> None:
        """Ready once the leases settled and every shard held is running; checked again when shards come or go."""
        while True:
            await self.leases.settled.wait()
            if all(r.ready.is_set() for r in self.shards.values()) and set(self.shards) <= self.leases.holds():
                self.ready.set()
                self._changed.clear()
                await self._changed.wait()
            else:
                await asyncio.sleep(0.05)  # a shard still rebuilding

    async def run(self) -> None:
        leases = asyncio.create_task(self.leases.run(), name=f"{self.name}-leases")
        readiness = asyncio.create_task(self._watch_ready(), name=f"{self.name}-ready")
        failure = asyncio.create_task(self._failure.wait())
        try:
            await asyncio.wait([leases, failure], return_when=asyncio.FIRST_COMPLETED)
        finally:
            readiness.cancel()
            failure.cancel()
            self.leases.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await leases  # its end releases every lease, each shard stopped first
        if self.failed is not None:
            raise self.failed
        if leases.done() and not leases.cancelled() and leases.exception() is not None:
            raise leases.exception()  # type: ignore[misc]

    def stop(self) -> None:
        self.leases.stop()


__all__ = ["Replica"]
