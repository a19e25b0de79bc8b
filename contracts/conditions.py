"""Setting conditions the Kubernetes way: `lastTransitionTime` moves only when the status flips."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from contracts.events import StatusCondition


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def carry_transitions(
    new: Iterable[StatusCondition], previous: Iterable[StatusCondition], now: str | None = None
) -> tuple[StatusCondition, ...]:
    """`new` conditions with the previous transition time kept where the status did not change."""
    before = {c.type: c for c in previous}
    stamp = now or now_rfc3339()
    out = []
    for condition in new:
        old = before.get(condition.type)
        kept = old.lastTransitionTime if old is not None and old.status == condition.status and old.lastTransitionTime else stamp
        out.append(
            StatusCondition(
                type=condition.type,
                status=condition.status,
                reason=condition.reason,
                message=condition.message,
                lastTransitionTime=kept,
                observedGeneration=condition.observedGeneration,
            )
        )
    return tuple(out)


def same_conditions(a: Iterable[StatusCondition], b: Iterable[StatusCondition]) -> bool:
    """Equal but for transition times: what decides whether a change is worth an event."""

    def strip(conditions: Iterable[StatusCondition]) -> list[tuple[str, str, str, str, int | None]]:
        return sorted((c.type, c.status, c.reason, c.message, c.observedGeneration) for c in conditions)

    return strip(a) == strip(b)
