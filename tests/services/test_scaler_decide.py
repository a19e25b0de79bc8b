"""The scaler's decision, pure (services/scaler/decide.py): bounds at once, up at once, down only after the delay, to
zero only when idle, from zero on demand, and a reason with the values that a user reads in `jetway events`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.modeldeployment import AutoscalingSpec
from services.scaler.decide import Inputs, Load, Window, decide

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def spec(**fields: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate({"maxReplicas": 8, **fields})


def busy(waiting: float, serving: int = 0, **more: Any) -> Load:
    """One member's engines: `waiting` per replica over `serving` ready replicas (0: the one member's)."""
    return Load(members=1, serving=serving, waiting=waiting, running=1.0, **more)


IDLE = Load(members=1, waiting=0.0, running=0.0, kv=0.0)


def after(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_above_the_target_it_scales_up_at_once_to_what_the_load_wants() -> None:
    out = decide(Inputs(spec(), 2, busy(7.5, serving=2), T0))
    assert out.replicas == 4  # ceil(7.5 * 2 / 4)
    assert (out.signal, out.value, out.target) == ("waitingPerReplica", 7.5, 4.0)
    assert out.reason == "waiting 7.5 per replica over 2 serving > target 4: 4 wanted"


def test_the_load_counts_only_replicas_that_serve_so_a_step_still_starting_asks_no_more() -> None:
    assert decide(Inputs(spec(), 1, busy(10, serving=1), T0)).replicas == 3
    # the same readings after the step, with the two new replicas still starting: no further step
    assert decide(Inputs(spec(), 3, busy(10, serving=1), after(1))).replicas == 3
    # the members read stand for the engines when the workload reports none ready (standalone)
    assert decide(Inputs(spec(), 1, Load(members=2, waiting=6.0), T0)).replicas == 3


def test_up_stops_at_the_maximum_and_says_what_the_load_wanted() -> None:
    out = decide(Inputs(spec(maxReplicas=3), 2, busy(20, serving=2), T0))
    assert out.replicas == 3
    assert out.reason == "waiting 20 per replica over 2 serving > target 4: 10 wanted, the maximum is 3"
    assert decide(Inputs(spec(maxReplicas=3), 3, busy(20, serving=3), T0)).replicas == 3  # at the maximum: no step


def test_on_target_is_no_step() -> None:
    assert decide(Inputs(spec(), 2, busy(4.0, serving=2), T0)).replicas == 2


def test_down_waits_for_the_delay_then_goes_to_the_most_wanted_over_it() -> None:
    a = spec(scaleDownDelaySeconds=300)
    first = decide(Inputs(a, 4, busy(1.0, serving=4), T0))  # 1 replica would do
    assert first.replicas == 4 and first.window == Window(T0, 1)
    middle = decide(Inputs(a, 4, busy(2.0, serving=4), after(100), first.window))  # 2 would do: the most wanted so far
    assert middle.replicas == 4 and middle.window == Window(T0, 2)
    early = decide(Inputs(a, 4, busy(1.0, serving=4), after(299), middle.window))
    assert early.replicas == 4
    due = decide(Inputs(a, 4, busy(1.0, serving=4), after(300), early.window))
    assert due.replicas == 2
    assert due.reason == "waiting 1 per replica over 4 serving < target 4: 2 sufficed for 300s (delay 300s)"
    assert due.window == Window()


def test_a_tick_that_wants_the_current_count_starts_the_delay_over() -> None:
    a = spec(scaleDownDelaySeconds=300)
    first = decide(Inputs(a, 4, busy(1.0, serving=4), T0))
    broken = decide(Inputs(a, 4, busy(4.0, serving=4), after(200), first.window))  # 4 wanted again: the stretch ends
    assert broken.window == Window()
    again = decide(Inputs(a, 4, busy(1.0, serving=4), after(310), broken.window))
    assert again.replicas == 4 and again.window == Window(after(310), 1)


def test_no_reading_keeps_the_count_and_the_stretch_under_way() -> None:
    a = spec(scaleDownDelaySeconds=60)
    first = decide(Inputs(a, 3, busy(1.0, serving=3), T0))
    gap = decide(Inputs(a, 3, Load(), after(30), first.window))
    assert gap.replicas == 3 and gap.window == first.window
    assert decide(Inputs(a, 3, busy(1.0, serving=3), after(60), gap.window)).replicas == 1


def test_never_below_the_minimum() -> None:
    a = spec(minReplicas=2, scaleDownDelaySeconds=0)
    assert decide(Inputs(a, 2, IDLE, T0)).replicas == 2
    assert decide(Inputs(a, 4, IDLE, T0)).replicas == 2


def test_a_range_that_moved_clamps_at_once() -> None:
    down = decide(Inputs(spec(maxReplicas=3), 6, busy(100, serving=6), T0))
    assert (down.replicas, down.signal, down.reason) == (3, "bounds", "outside the range 1..3")
    up = decide(Inputs(spec(minReplicas=2), 1, IDLE, T0))
    assert (up.replicas, up.reason) == (2, "outside the range 2..8")


def test_idle_goes_to_zero_after_the_delay_with_minimum_zero() -> None:
    a = spec(minReplicas=0, scaleDownDelaySeconds=120)
    first = decide(Inputs(a, 1, IDLE, T0))
    assert first.replicas == 1 and first.window == Window(T0, 0)
    zero = decide(Inputs(a, 1, IDLE, after(120), first.window))
    assert zero.replicas == 0
    assert zero.reason == "idle for 120s (nothing running, waiting or in flight; delay 120s)"


def test_a_request_still_running_keeps_one_replica() -> None:
    a = spec(minReplicas=0, scaleDownDelaySeconds=0)
    assert decide(Inputs(a, 1, Load(members=1, waiting=0.0, running=1.0), T0)).replicas == 1
    assert decide(Inputs(a, 1, Load(members=1, waiting=0.0, running=0.0, in_flight=1), T0)).replicas == 1
    assert decide(Inputs(a, 3, Load(members=1, serving=3, waiting=0.0, running=1.0), T0)).replicas == 1  # down to one, not zero


def test_zero_over_the_stretch_only_if_idle_all_along() -> None:
    a = spec(minReplicas=0, scaleDownDelaySeconds=100)
    first = decide(Inputs(a, 1, IDLE, T0))
    busy_once = decide(Inputs(a, 1, Load(members=1, waiting=0.0, running=1.0), after(50), first.window))
    assert busy_once.window == Window(), "one replica was wanted: the stretch below one ends"
    assert decide(Inputs(a, 1, IDLE, after(100), busy_once.window)).replicas == 1


def test_a_provider_that_cannot_go_to_zero_stops_at_one() -> None:
    a = spec(minReplicas=0, scaleDownDelaySeconds=0)
    assert decide(Inputs(a, 1, IDLE, T0, floor=1)).replicas == 1
    assert decide(Inputs(a, 0, Load(), T0, floor=1)).replicas == 1  # a zero it cannot keep is out of its range


def test_from_zero_on_demand_only() -> None:
    a = spec(minReplicas=0)
    assert decide(Inputs(a, 0, Load(), T0)).replicas == 0
    assert decide(Inputs(a, 0, Load(members=1, waiting=9.0), T0)).replicas == 0, "a stale engine's gauges are no demand"
    woken = decide(Inputs(a, 0, Load(held=3), T0))
    assert (woken.replicas, woken.signal, woken.value) == (1, "demand", 3.0)
    assert woken.reason == "3 request(s) held with no replica to serve them"


def test_in_flight_is_the_routers_total_over_the_replicas_serving() -> None:
    a = spec(signal="inFlightPerReplica")  # target 8
    out = decide(Inputs(a, 2, Load(members=1, serving=2, in_flight=40), T0))
    assert (out.replicas, out.value) == (5, 20.0)
    assert out.reason == "in flight 20 per replica over 2 serving > target 8: 5 wanted"


def test_kv_cache_use_against_its_fraction() -> None:
    a = spec(signal="kvCacheUsage")  # target 0.8
    out = decide(Inputs(a, 3, Load(members=1, serving=3, kv=0.95), T0))
    assert out.replicas == 4  # ceil(0.95 * 3 / 0.8)
    assert out.reason == "KV cache use 0.95 per replica over 3 serving > target 0.8: 4 wanted"
    assert decide(Inputs(spec(signal="kvCacheUsage", target=0.5), 2, Load(members=1, serving=2, kv=0.5), T0)).replicas == 2


def test_an_engine_without_the_gauge_decides_nothing() -> None:
    assert decide(Inputs(spec(), 2, Load(members=2, waiting=None), T0)).replicas == 2
