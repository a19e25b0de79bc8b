"""The scaler on a real nats-server: the router's load and demand signals in (published, not stored, as the router
publishes them), `ScaleDecided` out with the values that drove it, read back as `jetway events md/NAME` prints it.
The down delay passes on the test's own clock; every step waits on what was recorded, never on the wall clock."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client

from cli import history
from contracts import scaling
from contracts.admission import admit
from contracts.events import Envelope, ResourceApplied, Withdrawn
from contracts.pipeline import ProviderSelected
from contracts.scaling import DEMAND_SIGNALS, LOAD_SIGNALS, Demand, MemberLoad, ScaleDecided
from contracts.subjects import SCALER, SELECTOR, SPEC, Key
from runtime.bus import connect, ensure_streams
from runtime.eventstore import EventStore
from runtime.service import Runner, RunnerSettings
from services.scaler.handlers import ScalerService
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.nats import NatsEndpoint

KEY = Key("ModelDeployment", "default", "qwen")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Scaler:
    nc: Client
    url: str
    service: ScalerService
    clock: Clock
    generation: int = 0

    async def apply(self, autoscaling: dict[str, Any] | None, provider: str | None = "vllm", changes: dict[str, Any] | None = None) -> None:
        named = {"spec.provider": {"name": provider}} if provider else {}
        doc = changed(MD, {"spec.scaling.autoscaling": autoscaling, **named, **(changes or {})})
        if autoscaling is None:
            doc["spec"]["scaling"].pop("autoscaling")
        verdict = admit(doc)
        assert verdict.obj is not None, verdict.problems
        self.generation += 1
        event = ResourceApplied(
            kind=KEY.kind, namespace=KEY.namespace, name=KEY.name, generation=self.generation, spec=verdict.obj.wire()["spec"], uid="u1"
        )
        await EventStore(self.nc, producer="watcher").append(KEY.subject(SPEC), event)

    async def load(self, **reading: Any) -> None:
        """One member's load, as one router replica publishes it each probe tick."""
        fields: dict[str, Any] = {"member": "qwen-default", "deployment": "default/qwen", "models": ("qwen",), "healthy": True, **reading}
        await self.nc.publish(LOAD_SIGNALS, msgspec.json.encode(MemberLoad(**fields)))
        await self.nc.flush()

    async def demand(self, held: int) -> None:
        await self.nc.publish(DEMAND_SIGNALS, msgspec.json.encode(Demand(model="qwen", deployment="default/qwen", held=held, router="r1")))
        await self.nc.flush()

    async def decisions(self) -> list[Any]:
        items = await EventStore(self.nc, producer="test").read(KEY.subject(SCALER))
        return [i.event for i in items if isinstance(i, Envelope)]

    async def decided(self, check: Callable[[ScaleDecided], bool], message: str) -> ScaleDecided:
        """The first recorded decision that passes `check`, waited for."""

        async def found() -> ScaleDecided | None:
            return next((d for d in await self.decisions() if isinstance(d, ScaleDecided) and check(d)), None)

        result: ScaleDecided = await eventually(found, timeout=15, message=message)
        return result

    async def timeline(self) -> list[str]:
        """The lines `jetway events md/default/qwen` prints for the scaler's facet."""
        out = io.StringIO()
        assert await history.events(self.url, "md/default/qwen", None, None, False, "text", out=out) == 0
        return [line.split("[scaler by scaler]", 1)[1].strip() for line in out.getvalue().splitlines() if "[scaler by scaler]" in line]

    async def stretch_began(self) -> None:
        """The scaler has seen a lower count suffice (the down delay counts from the clock's now)."""
        await eventually(lambda: (live := self.service.state.live.get(KEY)) is not None and live.window.since is not None)


@pytest.fixture
def applied() -> bool:
    return True


@pytest.fixture
async def scaler(nats: NatsEndpoint, applied: bool) -> AsyncIterator[Scaler]:
    nc = await connect(nats.url, name="scaler-test")
    await ensure_streams(nc.jetstream())
    clock = Clock()
    service = ScalerService(applied=applied, tick=0.02, clock=clock)
    runner = Runner(service, nc, RunnerSettings(backoff=(0.05,)))
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(runner.ready.wait(), 20)
    try:
        yield Scaler(nc, nats.url, service, clock)
    finally:
        runner.stop()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 20)
        await nc.close()


async def test_load_above_the_target_scales_up_at_once_and_says_why(scaler: Scaler) -> None:
    await scaler.apply({"maxReplicas": 4, "scaleDownDelaySeconds": 60})
    start = await scaler.decided(lambda d: True, "the run's start")
    assert (start.replicas, start.applied, start.generation) == (1, True, 1)

    await scaler.load(running=2, waiting=10, in_flight=3, router="r1")
    up = await scaler.decided(lambda d: d.replicas == 3, "a step up to 3")
    assert (up.previous, up.signal, up.value, up.target, up.members) == (1, "waitingPerReplica", 10.0, 4.0, 1)

    await scaler.load(running=1, waiting=1, router="r1")  # at 3 replicas, one would do
    await scaler.stretch_began()
    scaler.clock.advance(60)
    await scaler.load(running=1, waiting=1, router="r1")
    await scaler.decided(lambda d: (d.previous, d.replicas) == (3, 1), "a step down after the delay")

    assert await scaler.timeline() == [
        "runs at 1: autoscaling 1..4 on waitingPerReplica (target 4): starts at 1",
        "scaled 1 -> 3: waiting 10 per replica over 1 serving > target 4: 3 wanted",
        "scaled 3 -> 1: waiting 1 per replica over 1 serving < target 4: 1 sufficed for 60s (delay 60s)",
    ]


async def test_idle_goes_to_zero_after_the_delay_and_demand_brings_one_back(scaler: Scaler) -> None:
    await scaler.apply({"minReplicas": 0, "maxReplicas": 2, "scaleDownDelaySeconds": 30})
    await scaler.decided(lambda d: True, "the run's start")
    await scaler.load(running=0, waiting=0, kv=0.0, in_flight=0, router="r1")
    await scaler.stretch_began()
    scaler.clock.advance(30)
    await scaler.load(running=0, waiting=0, kv=0.0, in_flight=0, router="r1")
    zero = await scaler.decided(lambda d: d.replicas == 0, "zero when idle")
    assert zero.previous == 1

    await scaler.demand(held=2)
    back = await scaler.decided(lambda d: d.previous == 0 and d.replicas == 1, "one replica on demand")
    assert (back.signal, back.value) == ("demand", 2.0)
    assert (await scaler.timeline())[-2:] == [
        "scaled 1 -> 0: idle for 30s (nothing running, waiting or in flight; delay 30s)",
        "scaled 0 -> 1: 2 request(s) held with no replica to serve them",
    ]


async def test_each_router_replicas_in_flight_counts(scaler: Scaler) -> None:
    await scaler.apply({"maxReplicas": 8, "signal": "inFlightPerReplica", "target": 4}, changes={"spec.scaling.replicas": 2})
    await scaler.decided(lambda d: d.replicas == 2, "the run's start at the spec's count")
    await scaler.load(waiting=0, in_flight=9, router="r1")
    await scaler.load(waiting=0, in_flight=9, router="r2")  # the same member, through another router replica
    # one router's 9 alone wants 3 (at 4 each); only both routers' 18 want 5
    up = await scaler.decided(lambda d: d.replicas == 5, "a step up to what both routers' requests want")
    assert up.signal == "inFlightPerReplica" and up.value == 18.0


async def test_a_new_generation_keeps_the_count_a_narrower_range_clamps_it_and_none_withdraws(scaler: Scaler) -> None:
    await scaler.apply({"maxReplicas": 4})
    await scaler.decided(lambda d: True, "the run's start")
    await scaler.load(waiting=12, router="r1")
    await scaler.decided(lambda d: d.replicas == 3, "a step up")

    await scaler.apply({"maxReplicas": 4}, changes={"spec.env": [{"name": "A", "value": "b"}]})  # an edit elsewhere
    kept = await scaler.decided(lambda d: d.generation == 2, "the count restated for generation 2")
    assert (kept.previous, kept.replicas) == (3, 3)
    await scaler.apply({"maxReplicas": 2})
    await scaler.decided(lambda d: d.generation == 3, "the count clamped for generation 3")
    await scaler.apply(None)  # autoscaling taken away: the spec's count again, and the scaler's slice cleared

    async def withdrawn() -> bool:
        return isinstance((await scaler.decisions())[-1], Withdrawn)

    await eventually(withdrawn, timeout=15, message="Withdrawn when autoscaling goes")
    assert (await scaler.timeline())[2:4] == [
        "runs at 3: generation 2: autoscaling 1..4 on waitingPerReplica (target 4): kept",
        "scaled 3 -> 2: outside the range 1..2",
    ]


@pytest.mark.parametrize("applied", [False])
async def test_standalone_only_recommends(scaler: Scaler) -> None:
    await scaler.apply({"maxReplicas": 4})
    await scaler.decided(lambda d: True, "the run's start")
    await scaler.load(waiting=10, router="r1")
    recommended = await scaler.decided(lambda d: d.replicas == 3, "a recommendation")
    assert recommended.applied is False
    assert await scaler.timeline() == [
        "would run at (recommendation) 1: autoscaling 1..4 on waitingPerReplica (target 4): starts at 1",
        "would scale (recommendation) 1 -> 3: waiting 10 per replica over 1 serving > target 4: 3 wanted",
    ]


async def test_a_provider_that_cannot_take_a_count_waits_for_its_selection_then_only_recommends(scaler: Scaler) -> None:
    await scaler.apply({"maxReplicas": 4}, provider=None)  # auto-selected: admission could not know the provider
    chosen = ProviderSelected(generation=1, engine="vllm", provider="kuberay", provider_reason="test")
    assert await scaler.decisions() == [], "nothing is decided before the provider is known"
    await EventStore(scaler.nc, producer="selector").append(KEY.subject(SELECTOR), chosen)
    start = await scaler.decided(lambda d: True, "the run's start")
    assert start.applied is False
    assert start.reason.endswith(f"(not applied: {scaling.PROVIDER_SCALING['kuberay'].why})")
    assert "KubeRay does not carry a RayService's changed worker replicas" in start.reason
