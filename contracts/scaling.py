"""Autoscaling: what the router reports of each member's load, the demand for a deployment at zero, and the
scaler's decisions (docs/autoscaling.md).

    router  --LOAD_SIGNALS (not stored, every probe tick)-->  scaler
    router  --DEMAND_SIGNALS (not stored, a request held)-->  scaler
    scaler  --ScaleDecided (stored, facet `scaler`)-------->  workload (renders the count), gateway, console

The signals are published, not stored: they are a measurement, many a second, and the decision they drive is
what is kept, carrying the values that drove it, so `jetway events md/NAME` says why each step happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import get_args

import msgspec

from contracts.events import Decision, register
from contracts.modeldeployment import AutoscalingSignal, AutoscalingSpec, ModelDeployment
from contracts.subjects import SIGNAL_PREFIX

LOAD_SIGNALS = f"{SIGNAL_PREFIX}.load"  # MemberLoad, one per member per probe tick
DEMAND_SIGNALS = f"{SIGNAL_PREFIX}.demand"  # Demand, while the router holds a request for a deployment at zero
# On the router member the gateway writes for a deployment whose autoscaling allows zero: the router holds a
# request for its model while no member of it is healthy, instead of answering 503 at once
SCALE_FROM_ZERO = "jetway.dev/scale-from-zero"

SIGNALS: tuple[str, ...] = get_args(AutoscalingSignal)  # spec.scaling.autoscaling.signal
# A target left out is the signal's own (resolved where it is used, never written into the stored spec: a default the
# server filled in would stay behind when the user later changes the signal, and could then break its bound)
DEFAULT_TARGETS: dict[str, float] = {"waitingPerReplica": 4.0, "inFlightPerReplica": 8.0, "kvCacheUsage": 0.8}


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
        if self.previous == self.replicas:  # a run begins, or a new generation keeps the count
            verb = "runs at" if self.applied else "would run at (recommendation)"
            return f"{verb} {self.replicas}: {self.reason}"
        verb = "scaled" if self.applied else "would scale (recommendation)"
        return f"{verb} {self.previous} -> {self.replicas}: {self.reason}"


register(ScaleDecided)


# --- what a count means for each provider, and where a deployment starts ---------------------------------------


@dataclass(frozen=True)
class ProviderScaling:
    """Whether a provider's objects take a changed replica count in place, and zero; `why` says why not."""

    scales: bool
    to_zero: bool
    why: str = ""


# The providers Jetway renders (services/workload/render/); docs/autoscaling.md has the table and its reasons.
PROVIDER_SCALING: dict[str, ProviderScaling] = {
    "vllm": ProviderScaling(True, True),
    "llmd": ProviderScaling(True, True),
    "dynamo": ProviderScaling(
        True,
        False,
        "with no worker Dynamo's frontend drops the model (it answers 404, so no request shows the demand to scale "
        "up on) and a multi-node worker group refuses 0 replicas",
    ),
    "kuberay": ProviderScaling(
        False,
        False,
        "KubeRay does not carry a RayService's changed worker replicas to its running RayCluster (Ray's own autoscaler sizes it)",
    ),
    "kaito": ProviderScaling(False, False, "KAITO refuses any change of a Workspace's resource.count once it exists"),
}


def provider_scaling(provider: str | None) -> ProviderScaling | None:
    """What `provider` can do with a count; None for a provider Jetway does not render (its own controller does)."""
    return PROVIDER_SCALING.get(provider) if provider else None


def autoscaling_of(md: ModelDeployment) -> AutoscalingSpec | None:
    """The deployment's autoscaling, when it has one that applies (aggregated mode: admission refuses the rest)."""
    spec = md.spec
    if spec.scaling is None or spec.scaling.autoscaling is None:
        return None
    if spec.serving is not None and spec.serving.mode == "disaggregated":
        return None
    return spec.scaling.autoscaling


def target_of(autoscaling: AutoscalingSpec) -> float:
    return autoscaling.target if autoscaling.target is not None else DEFAULT_TARGETS[autoscaling.signal]


def clamp(count: int, autoscaling: AutoscalingSpec, *, floor: int = 0) -> int:
    """`count` within [minReplicas, maxReplicas], and not below `floor` (1 for a provider that cannot go to zero)."""
    low = min(max(autoscaling.minReplicas, floor), autoscaling.maxReplicas)
    return max(low, min(autoscaling.maxReplicas, count))


def starting_replicas(md: ModelDeployment, autoscaling: AutoscalingSpec, *, floor: int = 0) -> int:
    """Where an autoscaled deployment starts: `spec.scaling.replicas` within its range."""
    return clamp(md.spec.scaling.replicas if md.spec.scaling else 1, autoscaling, floor=floor)


def current_replicas(md: ModelDeployment, last: Decision | None, *, floor: int = 0, recommended: bool = False) -> int | None:
    """The count an autoscaled deployment runs at: the scaler's last decision within the range the spec gives now
    (one made for an earlier generation still counts until the scaler decides for this one, so an edit elsewhere in
    the spec never resets the count), else its starting count. `recommended`: a recommendation (standalone) counts
    too. None: the deployment is not autoscaled (`spec.scaling.replicas` is its count, as without Jetway's field)."""
    autoscaling = autoscaling_of(md)
    if autoscaling is None:
        return None
    if isinstance(last, ScaleDecided) and (last.applied or recommended):
        return clamp(last.replicas, autoscaling, floor=floor)
    return starting_replicas(md, autoscaling, floor=floor)
