"""The scaler: each autoscaled ModelDeployment's replica count, decided from the load the router publishes and
recorded with the values that drove it (`ScaleDecided`, contracts/scaling.py), so `jetway events md/NAME` and the
console's timeline say why each step happened. The workload service renders the count; the gateway keeps the
deployment's router member while it is at zero.

A decision is recorded when the count changes, when a run begins (autoscaling set, or the provider known), and
once for each new generation of the spec (its range may have moved, and the decision stands for that generation:
`observedGeneration` waits for it). Autoscaling taken away: `Withdrawn`, and the workload renders
`spec.scaling.replicas` again.

The readings are signals, not events (contracts/scaling.py): the service folds them as they come (`alongside`) and
decides each autoscaled deployment again every `tick` seconds. `applied` is False where Jetway does not own the
engines (standalone): each decision is then a recommendation, and nothing renders it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from contracts.events import Envelope, Withdrawn
from contracts.scaling import (
    DEMAND_SIGNALS,
    LOAD_SIGNALS,
    Demand,
    MemberLoad,
    ScaleDecided,
    autoscaling_of,
    provider_scaling,
    starting_replicas,
    target_of,
)
from contracts.subjects import SELECTOR, SPEC, WORKLOAD, Key, kind_filter
from runtime.service import Effects, NotHeld, Runner, Service
from services.scaler.decide import Inputs, Window, decide
from services.scaler.projection import KIND, SELF, ScalerState

log = logging.getLogger("jetway.scaler")
TICK_SECONDS = 1.0  # how often every autoscaled deployment is decided again
STALE_SECONDS = 15.0  # a reading older than this is forgotten: three of the router's probe ticks (5 s)


def _now() -> datetime:
    return datetime.now(UTC)


class ScalerService(Service):
    name = SELF
    # the spec, the provider chosen, and how many replicas the workload reports ready (what the load is spread over)
    consumes = (kind_filter(KIND), kind_filter(KIND, SELECTOR), kind_filter(KIND, WORKLOAD))

    def __init__(
        self,
        *,
        applied: bool = False,
        tick: float = TICK_SECONDS,
        stale_after: float = STALE_SECONDS,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.state = ScalerState()
        self.applied = applied  # Jetway owns the engines (a cluster): the workload renders what is decided here
        self.tick = tick
        self.stale_after = stale_after
        self.clock = clock  # the tests' own, so that a down delay passes without waiting for it

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        return (envelope.key,) if envelope.key.kind == KIND and envelope.facet in (SPEC, SELECTOR) else ()

    def keys(self) -> Iterable[Key]:
        return list(self.state.deployments)

    async def alongside(self, runner: Runner) -> None:
        """The router's readings, folded as they come, and a decision for every autoscaled deployment each tick."""
        loads, demands = msgspec.json.Decoder(MemberLoad), msgspec.json.Decoder(Demand)

        async def measured(msg: Any) -> None:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                self.state.measured(loads.decode(msg.data), self.clock())

        async def held(msg: Any) -> None:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                self.state.held(demands.decode(msg.data), self.clock())

        subscriptions = [await runner.nc.subscribe(LOAD_SIGNALS, cb=measured), await runner.nc.subscribe(DEMAND_SIGNALS, cb=held)]
        try:
            while True:
                await asyncio.sleep(self.tick)
                await self.decide_all(runner)
        finally:
            for subscription in subscriptions:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()

    async def decide_all(self, runner: Runner) -> None:
        """One tick: every autoscaled deployment this runner decides about, decided again."""
        keys = [key for key, d in list(self.state.deployments.items()) if d.autoscaled and runner.owns(key)]
        results = await asyncio.gather(*(runner.reconcile(key) for key in keys), return_exceptions=True)
        for error in results:
            if isinstance(error, Exception) and not isinstance(error, NotHeld):
                log.warning("scaling decision failed: %s", error, extra={"service": self.name})

    async def reconcile(self, key: Key, effects: Effects) -> None:
        d = self.state.deployments.get(key)
        if d is None or d.applied is None or d.deleting or d.paused:
            return
        autoscaling = autoscaling_of(d.applied)
        if autoscaling is None:  # not (or no longer) autoscaled: its count is the spec's again
            self.state.live.pop(key, None)
            if isinstance(d.last, ScaleDecided):
                await effects.emit(key, Withdrawn(generation=d.generation))
            return
        provider = d.chosen()
        if provider is None:
            return  # the selector has not chosen yet: what a count can do depends on the provider
        can = provider_scaling(provider)
        floor = 0 if can is None or can.to_zero else 1
        applies = self.applied and can is not None and can.scales
        note = ""
        if self.applied and not applies:
            note = f" (not applied: {can.why if can is not None else f'provider {provider} runs it with its own controller'})"
        target = target_of(autoscaling)
        scope = f"autoscaling {max(autoscaling.minReplicas, floor)}..{autoscaling.maxReplicas} on {autoscaling.signal} (target {target:g})"
        live = self.state.live_of(key)
        last = d.last
        counted = last if isinstance(last, ScaleDecided) and last.applied == applies else None
        if counted is None:  # a run begins: from the spec's count, within the range
            start = starting_replicas(d.applied, autoscaling, floor=floor)
            decision = ScaleDecided(
                generation=d.generation,
                replicas=start,
                previous=start,
                signal="bounds",
                target=target,
                reason=f"{scope}: starts at {start}{note}",
                applied=applies,
            )
            await effects.emit(key, decision)
            live.window = Window()
            return
        now = self.clock()
        load = live.load(now, self.stale_after, serving=d.ready)
        outcome = decide(Inputs(autoscaling, counted.replicas, load, now, live.window, floor))
        if outcome.replicas != counted.replicas:
            decision = ScaleDecided(
                generation=d.generation,
                replicas=outcome.replicas,
                previous=counted.replicas,
                signal=outcome.signal,
                value=outcome.value,
                target=outcome.target,
                members=load.members,
                reason=outcome.reason + note,
                applied=applies,
            )
            await effects.emit(key, decision)
        elif counted.generation != d.generation:  # the spec changed: the count stands for this generation too
            decision = ScaleDecided(
                generation=d.generation,
                replicas=counted.replicas,
                previous=counted.replicas,
                signal="bounds",
                target=target,
                members=load.members,
                reason=f"generation {d.generation}: {scope}: kept{note}",
                applied=applies,
            )
            await effects.emit(key, decision)
        live.window = outcome.window  # only once recorded: a conflict decides again from the stretch as it was


__all__ = ["STALE_SECONDS", "TICK_SECONDS", "ScalerService"]
