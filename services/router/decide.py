"""The router's decisions, pure: a member's health from a probe, which members may take a request, token
estimates. Which of them takes it is services/router/policy.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from contracts.events import StatusCondition, StatusSlice
from contracts.router import MemberHealthChanged
from services.router import load as loads
from services.router.projection import Member, Members, Traffic

CHARS_PER_TOKEN = 4


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


def serves(member: Member, model: str, traffic: Traffic) -> bool:
    """Whether a member may take a new request for `model` now."""
    health_now = member.health
    if member.spec.draining or member.needs_probe or traffic.failed or health_now is None or not health_now.healthy:
        return False
    return member.spec.backend == "echo" or model in health_now.advertised


@dataclass(frozen=True)
class Candidates:
    declared: bool  # some member declares the model at all
    accepted: bool  # some member that declares it accepts the API's format
    ready: list[Member]


def candidates(members: Members, model: str, api_format: str) -> Candidates:
    """The members that may take a request for `model` in `api_format` now, in a stable order (by key)."""
    declared = members.declaring(model)
    if not declared:
        return Candidates(False, False, [])
    accepting = [m for m in declared if api_format in m.formats]
    traffic = members.traffic
    return Candidates(True, bool(accepting), [m for m in accepting if serves(m, model, traffic.get(m.key) or Traffic())])


def saturated(member: Member) -> bool:
    return member.health is not None and member.health.saturated


def _text_length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # content parts, or a token array for completions
        return sum(
            _text_length(part.get("text", "")) if isinstance(part, dict) else 1 if isinstance(part, int) else _text_length(part)
            for part in content
        )
    return 0


@dataclass(frozen=True)
class Estimate:
    prompt: int
    completion: int

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def estimate(body: dict[str, Any], chat: bool) -> Estimate:
    """Prompt tokens at 4 characters a token (plus 4 per chat message), plus the requested maximum."""
    if chat:
        messages = body.get("messages") or []
        chars = sum(_text_length(m.get("content")) for m in messages if isinstance(m, dict))
        prompt = math.ceil(chars / CHARS_PER_TOKEN) + 4 * len(messages)
    else:
        chars = _text_length(body.get("prompt"))
        prompt = math.ceil(chars / CHARS_PER_TOKEN)
    wanted = body.get("max_completion_tokens", body.get("max_tokens"))
    completion = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0 else 0
    return Estimate(prompt, completion)


def fits(member: Member, model: str, needed: Estimate) -> bool:
    window = member.window(model)
    return window is None or needed.total <= window


def too_large_message(model: str, needed: Estimate, windows: list[int]) -> str:
    return (
        f"the request needs about {needed.total} tokens ({needed.prompt} prompt tokens, estimated at {CHARS_PER_TOKEN} "
        f"characters per token plus 4 per message, and {needed.completion} max_tokens), more than the "
        f"{max(windows)}-token context window of {model!r}"
    )
