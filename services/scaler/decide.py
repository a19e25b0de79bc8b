"""The scaler's decision for one deployment, pure: its range, the count it runs at, its load now; the count it
should run at, and why, in a sentence with the values (docs/autoscaling.md).

- **Bounds first.** A count outside [minReplicas, maxReplicas] (the range changed) is brought into it at once.
- **From zero** on demand only: a request the router holds for the deployment takes it to one replica.
- **Up at once.** The load's total over the replicas serving it (`Load.engines`), divided by the target per replica,
  is the count it wants (`ceil(total / target)`, what KPA and HPA compute): more than the deployment runs at, it
  goes there now, no further than maxReplicas. The total counts only replicas that serve, so a step up that is
  still starting does not make the same load ask for more again.
- **Down after a delay.** A lower count must have sufficed for `scaleDownDelaySeconds` without a break (`Window`);
  then the deployment goes to the highest count wanted over that stretch, never below minReplicas. Zero only
  when minReplicas is 0 and nothing ran, waited, was in flight or was held for the whole delay.
- **No signal, no step.** With no fresh reading the count stays, and so does a stretch under way: a gap in the
  readings says nothing against it.

The load is as the router reads it (services/router/load.py): each member's engine gauges (a member is one engine,
or the model's Service, where one engine of several answers each probe: their mean is the value per replica either
way) and the routers' own requests in flight to the members, summed over every router replica.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from contracts.modeldeployment import AutoscalingSpec
from contracts.scaling import clamp, target_of

# how a signal's value reads in a reason
WORDS = {"waitingPerReplica": "waiting", "inFlightPerReplica": "in flight", "kvCacheUsage": "KV cache use"}
EPSILON = 1e-9  # 4 per replica at a target of 4 is on target, not a hair above it


@dataclass(frozen=True)
class Load:
    """A deployment's load now, from its members' fresh readings (projection.py folds them)."""

    members: int = 0  # healthy members whose engine gauges were read
    serving: int = 0  # replicas ready to serve, as the workload last observed them (0: not known; the members then)
    waiting: float | None = None  # requests queued per engine (the mean of the members'); None: no engine reports it
    running: float | None = None  # requests running per engine, likewise
    kv: float | None = None  # KV cache in use, 0..1, likewise
    in_flight: int = 0  # requests the routers have in flight to its members, all together
    held: int = 0  # requests the routers hold for it while nothing serves it, all together

    @property
    def engines(self) -> int:
        """The replicas the readings stand for: those ready, else one per member read."""
        return self.serving or self.members

    @property
    def idle(self) -> bool:
        """Nothing running, waiting, in flight or held, as far as anything reports."""
        return not (self.held or self.in_flight or self.waiting or self.running)


@dataclass(frozen=True)
class Window:
    """A stretch over which fewer replicas sufficed: since when, and the most wanted in it (what a step down goes to)."""

    since: datetime | None = None
    wanted: int = 0


@dataclass(frozen=True)
class Inputs:
    autoscaling: AutoscalingSpec
    replicas: int  # the count it runs at (the last decided)
    load: Load
    now: datetime
    window: Window = field(default_factory=Window)
    floor: int = 0  # 1 on a provider that cannot go to zero


@dataclass(frozen=True)
class Outcome:
    """The count to run at; `signal`, `value`, `target` and `reason` say why when it differs from the inputs'."""

    replicas: int
    window: Window = field(default_factory=Window)
    signal: str = ""
    value: float | None = None
    target: float | None = None
    reason: str = ""


def value_of(signal: str, load: Load) -> float | None:
    """The signal's value per serving replica now; None when nothing reports it."""
    if load.members == 0:
        return None
    if signal == "waitingPerReplica":
        return load.waiting
    if signal == "kvCacheUsage":
        return load.kv
    return load.in_flight / load.engines


def wanted(value: float, engines: int, target: float) -> int:
    """The count that holds the load's total (`value` per replica over `engines`) at `target` per replica."""
    return max(0, math.ceil(value * engines / target - EPSILON))


def _number(value: float) -> str:
    return f"{value:.3g}"


def decide(inputs: Inputs) -> Outcome:
    a, n, load = inputs.autoscaling, inputs.replicas, inputs.load
    low, high = min(max(a.minReplicas, inputs.floor), a.maxReplicas), a.maxReplicas
    bounded = clamp(n, a, floor=inputs.floor)
    if bounded != n:
        return Outcome(bounded, signal="bounds", reason=f"outside the range {low}..{high}")
    if n == 0:
        if load.held > 0:
            return Outcome(
                max(1, low), signal="demand", value=float(load.held), reason=f"{load.held} request(s) held with no replica to serve them"
            )
        return Outcome(0)
    target = target_of(a)
    value = value_of(a.signal, load)
    if value is None:
        return Outcome(n, inputs.window)
    words = f"{WORDS[a.signal]} {_number(value)} per replica over {load.engines} serving"
    count = wanted(value, load.engines, target)
    if count > n:
        up = min(count, high)
        if up == n:
            return Outcome(n)  # at its maximum already
        reason = f"{words} > target {_number(target)}: {count} wanted" + (f", the maximum is {high}" if count > high else "")
        return Outcome(up, signal=a.signal, value=value, target=target, reason=reason)
    count = max(count, low)
    if count == 0 and not load.idle:
        count = 1  # a request still running, waiting or in flight keeps one replica
    if count >= n:
        return Outcome(n)  # this many are wanted (or the range allows no fewer): any stretch below ends
    window = inputs.window
    since = window.since or inputs.now
    most = max(window.wanted, count) if window.since else count
    waited = (inputs.now - since).total_seconds()
    if waited < a.scaleDownDelaySeconds:
        return Outcome(n, Window(since, most))
    if most == 0:
        reason = f"idle for {waited:.0f}s (nothing running, waiting or in flight; delay {a.scaleDownDelaySeconds}s)"
    else:
        reason = f"{words} < target {_number(target)}: {most} sufficed for {waited:.0f}s (delay {a.scaleDownDelaySeconds}s)"
    return Outcome(most, signal=a.signal, value=value, target=target, reason=reason)


__all__ = ["Inputs", "Load", "Outcome", "Window", "decide", "value_of", "wanted"]
