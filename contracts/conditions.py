"""Setting conditions the Kubernetes way: `lastTransitionTime` moves only when the status flips."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec

from contracts.events import Decision, StatusCondition

D = TypeVar("D", bound=Decision)


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


def carried(new: D, old: Decision | None) -> D:
    """`new` with transition times kept from `old` where a condition's status did not flip."""
    previous = old.status.conditions if old is not None else ()
    status = msgspec.structs.replace(new.status, conditions=carry_transitions(new.status.conditions, previous))
    return msgspec.structs.replace(new, status=status)


def same_decision(new: Decision, old: Decision | None) -> bool:
    """Whether recording `new` after `old` would tell anyone anything new (transition times aside)."""
    if old is None or type(new) is not type(old):
        return False

    def plain(decision: Decision) -> Any:
        data = msgspec.to_builtins(decision)
        for condition in data.get("status", {}).get("conditions", []):
            condition.pop("lastTransitionTime", None)
        return data

    return bool(plain(new) == plain(old))
