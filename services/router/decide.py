"""The prober's decision, pure: a member's health from what a probe found (`MemberHealthChanged`).

Which member takes a request is services/router/policy.py."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.events import StatusCondition, StatusSlice
from contracts.router import MemberHealthChanged
from services.router import load as loads
from services.router.projection import Member


@dataclass(frozen=True)
class ProbeOutcome:
    """What a probe found. Exactly one of: models (it answered 2xx), or a failure reason."""

    models: tuple[str, ...] | None = None
    reason: str = ""  # Unreachable | ProbeFailed | SecretNotFound | DialRefused | ComputeOperatorNotEnrolled
    message: str = ""
    load: loads.Load | None = None  # what its /metrics reported (None: no /metrics, or no engine gauges on it)


def saturation(member: Member, load: loads.Load) -> StatusCondition:
    """The Saturated condition of a member that reports its load; its message has no figures, so a change of load
    that does not cross a threshold records nothing."""
    was = member.health is not None and member.health.saturated
    if loads.saturated(load, was):
        return StatusCondition(
            type="Saturated",
            status="True",
            reason="QueueOrKVCacheFull",
            observedGeneration=member.generation,
            message=f"the member reports a KV cache at least {loads.SATURATED_KV:.0%} full or at least {loads.SATURATED_WAITING} "
            f"requests waiting; the router sends it new requests only when every member is saturated",
        )
    return StatusCondition(
        type="Saturated",
        status="False",
        reason="Headroom",
        observedGeneration=member.generation,
        message="the member reports room in its queue and KV cache",
    )


def health(member: Member, outcome: ProbeOutcome, transport: str) -> MemberHealthChanged:
    """The decision a probe outcome stands for (transition times are carried by the caller)."""
    generation = member.generation
    if outcome.models is None:
        conditions = (
            StatusCondition(type="Healthy", status="False", reason=outcome.reason, message=outcome.message, observedGeneration=generation),
            StatusCondition(
                type="ModelsAdvertised",
                status="Unknown",
                reason="NotProbed",
                message="the upstream could not be asked for its models",
                observedGeneration=generation,
            ),
        )
        return MemberHealthChanged(
            generation=generation,
            healthy=False,
            reason=outcome.reason,
            transport=transport,
            status=StatusSlice(conditions=conditions, phase="Failed", message=outcome.message, fields={"transport": transport}),
        )
    advertised = outcome.models
    missing = tuple(m for m in member.declared if m not in advertised)
    if missing:
        models = StatusCondition(
            type="ModelsAdvertised",
            status="False",
            reason="ModelsMissing",
            observedGeneration=generation,
            message=f"declared models not advertised by the upstream: {', '.join(missing)}",
        )
    else:
        models = StatusCondition(
            type="ModelsAdvertised",
            status="True",
            reason="AllModelsAdvertised",
            observedGeneration=generation,
            message="every declared model is advertised",
        )
    ok = StatusCondition(
        type="Healthy",
        status="True",
        reason="ProbeSucceeded",
        observedGeneration=generation,
        message="echo backend: always ready" if member.spec.backend == "echo" else "GET /v1/models answered",
    )
    found: tuple[StatusCondition, ...] = (ok, models) if outcome.load is None else (ok, models, saturation(member, outcome.load))
    return MemberHealthChanged(
        generation=generation,
        healthy=True,
        reason="ProbeSucceeded",
        advertised=advertised,
        missing=missing,
        transport=transport,
        saturated=found[-1].type == "Saturated" and found[-1].status == "True",
        status=StatusSlice(conditions=found, phase="Healthy", fields={"transport": transport, "advertisedModels": list(advertised)}),
    )
