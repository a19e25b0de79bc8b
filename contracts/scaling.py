"""Autoscaling: what the router reports of each member's load, the demand for a deployment at zero, and the
scaler's decisions (docs/autoscaling.md).

    router  --LOAD_SIGNALS (not stored, every probe tick)-->  scaler
    router  --DEMAND_SIGNALS (not stored, a request held)-->  scaler
    scaler  --ScaleDecided (stored, facet `scaler`)-------->  workload (renders the count), gateway, console

The signals are published, not stored: they are a measurement, many a second, and the decision they drive is
what is kept, carrying the values that drove it, so `jetway events md/NAME` says why each step happened.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from contracts.events import Decision, register
from contracts.subjects import SIGNAL_PREFIX

LOAD_SIGNALS = f"{SIGNAL_PREFIX}.load"  # MemberLoad, one per member per probe tick
DEMAND_SIGNALS = f"{SIGNAL_PREFIX}.demand"  # Demand, while the router holds a request for a deployment at zero
# On the router member the gateway writes for a deployment whose autoscaling allows zero: the router holds a
# request for its model while no member of it is healthy, instead of answering 503 at once
SCALE_FROM_ZERO = "jetway.dev/scale-from-zero"

SIGNALS = ("waitingPerReplica", "inFlightPerReplica", "kvCacheUsage")  # spec.scaling.autoscaling.signal


class MemberLoad(msgspec.Struct, frozen=True):
    """One member's load as one router replica's prober read it (services/router/load.py), with the router's
    own count of requests in flight to it."""

    member: str
    deployment: str  # "namespace/name" from the member's airunway.ai/model-deployment labels; "" for a user's member
    models: tuple[str, ...]
    healthy: bool
    running: int | None = None  # None: the engine reports no such gauge
    waiting: int | None = None
    kv: float | None = None  # 0..1
    in_flight: int = 0
    router: str = ""  # the router replica that measured it
    at: datetime = msgspec.field(default_factory=lambda: datetime.now(UTC))


class Demand(msgspec.Struct, frozen=True):
    """Requests held by a router replica for a model no healthy member serves."""

    model: str
    deployment: str  # "namespace/name" when the held model's member names one; "" otherwise
    held: int  # requests held for it on that replica now
    router: str = ""
    at: datetime = msgspec.field(default_factory=lambda: datetime.now(UTC))


class ScaleDecided(Decision, frozen=True, tag="ScaleDecided.v1"):
    """The scaler's replica count for a deployment, and why. `applied` False: a recommendation only (standalone,
    where Jetway does not own the engines)."""

    replicas: int = 1
    previous: int = 1
    signal: str = ""  # one of SIGNALS, or "demand" (a request held at zero), "bounds" (the range changed)
    value: float | None = None  # the signal's value per replica that drove it
    target: float | None = None
    members: int = 0  # members whose load was counted
    reason: str = ""  # a sentence: "waiting 7.5 per replica > target 4 for 2 replicas: 2 -> 4"
    applied: bool = True

    def describe(self) -> str:
        verb = "scaled" if self.applied else "would scale (recommendation)"
        return f"{verb} {self.previous} -> {self.replicas}: {self.reason}"


register(ScaleDecided)
