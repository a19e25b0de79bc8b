"""The router service: members in, a probe per reconcile (and per tick), health decisions out; each member's load
published each tick (`MemberLoad` on LOAD_SIGNALS, for the scaler), and held and fairly queued requests woken when a
member may have become ready.

Every router replica folds every member (it routes to any of them). With several replicas, each probes and
records the health of the members in the partitions it holds a lease on (`leases`); a member another replica
holds is probed here only when this router saw it fail a request, to clear its own failure mark, never recorded.
Every replica reads every member's reported load (its /metrics) each tick, since every replica routes to it:
the load of the members it probes comes with the probe, the others' is read on their own (`_read_loads`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import msgspec

from contracts.conditions import carried, same_decision
from contracts.events import Envelope
from contracts.router import PROBE_SIGNALS, probe_signal
from contracts.scaling import LOAD_SIGNALS, MemberLoad
from contracts.subjects import ROUTER, SPEC, Key, kind_filter
from runtime.leases import Leases
from runtime.service import Effects, Runner, Service
from services.router import decide, policy
from services.router.fair import Fair
from services.router.hold import Holds
from services.router.load import Load
from services.router.probe import Prober
from services.router.projection import Member, Members, Traffic

log = logging.getLogger("jetway.gateway")
DEFAULT_PROBE_INTERVAL = 5.0


class RouterService(Service):
    name = ROUTER
    consumes = (kind_filter("InferencePoolMember"),)

    def __init__(
        self, prober: Prober, *, probe_interval: float = DEFAULT_PROBE_INTERVAL, leases: Leases | None = None, router: str = ""
    ) -> None:
        self.members = Members()
        self.prober = prober
        self.resync_interval = probe_interval  # the tick: every member is probed this often
        self.runner: Runner | None = None
        self.leases = leases  # several router replicas: which partitions' members this one probes and records
        self.router = router  # this replica's name, in the load signals
        self.holds: Holds | None = None  # requests held for models starting from zero (hold.py), woken here
        self.fair: Fair | None = None  # requests queued while a model's members are saturated (fair.py), woken here too
        self._probing: set[asyncio.Task[None]] = set()
        self._reprobes: dict[Key, asyncio.Task[None]] = {}  # one re-probe in flight per member

    def owns(self, key: Key) -> bool:
        return self.leases is None or self.leases.valid(key.partition)

    async def alongside(self, runner: Runner) -> None:
        """The leases, and the load of the members other replicas probe; on stop, what is in flight is cancelled."""
        duties = [asyncio.create_task(self._read_loads())]
        if self.leases is not None:
            duties.append(asyncio.create_task(self.leases.run()))
        try:
            await asyncio.gather(*duties)
        finally:
            if self.holds is not None:
                self.holds.close()
            tasks = [*duties, *self._probing, *self._reprobes.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._reprobes.clear()

    async def _read_loads(self) -> None:
        """Each tick, for the members another replica probes: their credentials (a rotated secret is picked up) and
        their reported load. The first pass runs at once, so a replica routes to every member from the start."""
        if self.leases is None:
            await asyncio.Event().wait()  # one replica probes every member, and reads the load with each probe
        while True:
            others = [m for key, m in list(self.members.items.items()) if not self.owns(key) and m.spec.backend != "echo"]
            await asyncio.gather(*(self._follow(m) for m in others), return_exceptions=True)
            await asyncio.sleep(self.resync_interval or DEFAULT_PROBE_INTERVAL)  # the probe tick

    async def _follow(self, member: Member) -> None:
        if (member.spec.transport or "http-direct") == "http-direct":
            await self.prober.resolve(member)
        load = await self.prober.load(member)
        if member.key in self.members.items:
            traffic = self.members.traffic_of(member.key)
            traffic.load = load
            if self.runner is not None:
                healthy = member.health is not None and member.health.healthy  # as the replica that probes it recorded
                await self.runner.nc.publish(LOAD_SIGNALS, load_signal(member, load, healthy, traffic, self.router))

    async def gained(self, partition: str) -> None:
        """A partition's lease: its members are probed now, not at the next tick."""
        if self.runner is not None and self.runner.ready.is_set():
            task = asyncio.get_running_loop().create_task(self.runner.reconcile_all(partition))
            self._probing.add(task)
            task.add_done_callback(self._probing.discard)

    def fold(self, envelope: Envelope) -> None:
        self.members.fold(envelope)
        member = self.members.items.get(envelope.key)
        if member is not None:
            self._wake(member)  # its health (or a new spec) may make it ready
        if member is None:
            self.prober.forget(envelope.key)
        elif envelope.facet == SPEC and self.runner is not None and self.runner.ready.is_set() and not self.owns(envelope.key):
            # applied or changed, probed by another replica: resolved here now, not at the next tick
            task = asyncio.get_running_loop().create_task(self._follow(member))
            self._probing.add(task)
            task.add_done_callback(self._probing.discard)

    def _wake(self, member: Member) -> None:
        """A member that may have become ready: the requests held for its models (hold.py) and those queued for a slot
        (fair.py) are looked at again."""
        holds = self.holds
        if holds is not None and holds.queues:
            holds.wake(member.declared)
        if self.fair is not None:
            self.fair.wake(member.declared)

    def projection(self) -> Members:
        return self.members

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        return (envelope.key,) if envelope.facet == SPEC else ()

    def keys(self) -> Iterable[Key]:
        return list(self.members.items)

    async def reconcile(self, key: Key, effects: Effects) -> None:
        member = self.members.items.get(key)
        if member is None:
            return
        outcome, transport = await self.prober.probe(member)
        traffic = self.members.traffic_of(key)
        traffic.load = outcome.load
        if outcome.models is not None:
            traffic.failed = False
            self._wake(member)  # a cleared failure mark, with its health unchanged, records nothing
        if not effects.runner.owns(key):
            return  # another replica records this member's health; this probe only cleared our own mark
        decision = carried(decide.health(member, outcome, transport), member.health)
        nc = effects.runner.nc
        await nc.publish(PROBE_SIGNALS, probe_signal(key.subject()))
        await nc.publish(LOAD_SIGNALS, load_signal(member, outcome.load, decision.healthy, traffic, self.router))
        if not same_decision(decision, member.health):
            await effects.emit(key, decision)

    def probe_model(self, model: str) -> None:
        """Probe the members of `model` that are not ready, now (a request is held for it: hold.py's ticker)."""
        traffic = self.members.traffic
        for member in self.members.declaring(model):
            if not policy.serves(member, model, traffic.get(member.key) or Traffic()):
                self._request_probe(member.key)

    def _request_probe(self, key: Key) -> None:
        if self.runner is not None and key not in self._reprobes:  # one in flight is enough: it clears the mark for all
            self._reprobes[key] = asyncio.get_running_loop().create_task(self._reprobe(key))

    def member_failed(self, key: Key, reason: str) -> None:
        """The router saw a member fail mid-request: no new traffic until a probe says otherwise."""
        self.members.traffic_of(key).failed = True
        log.warning("member failed a request", extra={"member": key.name, "reason": reason})
        self._request_probe(key)

    async def _reprobe(self, key: Key) -> None:
        assert self.runner is not None
        try:
            await self.runner.reconcile(key)
        except Exception as exc:
            log.warning("re-probe failed: %s", exc, extra={"member": key.name})
        finally:
            self._reprobes.pop(key, None)


def load_signal(member: Member, load: Load | None, healthy: bool, traffic: Traffic, router: str) -> bytes:
    """A member's MemberLoad as this replica measured it this tick: what its /metrics reported (None: nothing, or
    not an engine), and this router's own requests in flight to it."""
    return msgspec.json.encode(
        MemberLoad(
            member=member.name,
            deployment=member.deployment,
            models=member.declared,
            healthy=healthy,
            running=load.running if load is not None else None,
            waiting=load.waiting if load is not None else None,
            kv=load.kv if load is not None else None,
            in_flight=traffic.outstanding,
            router=router,
        )
    )
