"""What the watcher writes back to the cluster, decided purely: status per owner, the cleanup verdict.

Each service's decision about a resource becomes that service's own server-side-apply patch
of the status subresource (field manager `jetway-<service>`), so its conditions and fields
never clobber another's; the composed `phase`, `message` and `observedGeneration` are a
separate manager's (`jetway-status`). `lastTransitionTime` moves only when a condition's
status flips, judged against what the cluster shows now.
"""

from __future__ import annotations

import functools
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from pydantic import BaseModel

from contracts.events import StatusCondition
from contracts.kinds import KINDS
from contracts.subjects import REPORTED
from runtime.resources import PHASED_KINDS, ResourceState, condition_dict

COMPOSER = "status"  # the field manager of phase, message and observedGeneration
FROM_CLUSTER = (REPORTED,)  # facets recorded from the cluster's own status: never written back
CLEANUP_GRACE = timedelta(minutes=5)  # after this long Terminating, the finalizer goes anyway (as AI Runway does)


@functools.cache
def status_fields(kind: str) -> frozenset[str]:
    """The top-level status fields a kind's schema has (a write of any other would be refused or pruned)."""
    declared = KINDS[kind].model.model_fields.get("status")
    annotation = declared.annotation if declared else None
    model = next((a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return frozenset((f.alias or n) for n, f in model.model_fields.items()) if model else frozenset()


def fitting(kind: str, status: dict[str, Any]) -> dict[str, Any]:
    allowed = status_fields(kind)
    return {k: v for k, v in status.items() if k in allowed}


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _live_conditions(live: dict[str, Any]) -> list[StatusCondition]:
    out = []
    for c in live.get("conditions") or []:
        if isinstance(c, dict) and c.get("type"):
            out.append(
                StatusCondition(
                    type=c["type"],
                    status=str(c.get("status", "")),
                    reason=str(c.get("reason", "")),
                    lastTransitionTime=str(c.get("lastTransitionTime", "")),
                )
            )
    return out


def _transition(condition: StatusCondition, live: StatusCondition | None, stamp: str) -> StatusCondition:
    """The condition with the cluster's transition time kept unless its status flipped."""
    if live is not None and live.status == condition.status and live.lastTransitionTime:
        when = live.lastTransitionTime
    else:
        when = condition.lastTransitionTime or stamp
    return msgspec.structs.replace(condition, lastTransitionTime=when)


def owner_statuses(state: ResourceState, live: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """owner → the status that owner's field manager applies (its conditions and fields)."""
    out: dict[str, dict[str, Any]] = {}
    previous = {c.type: c for c in _live_conditions(live)}
    for owner, envelope in sorted(state.decisions.items()):
        decision = state.decision(owner)
        if decision is None or owner in FROM_CLUSTER:
            continue
        stamp = _rfc3339(envelope.stored_at or envelope.time)
        status: dict[str, Any] = dict(decision.status.fields)
        conditions = [_transition(c, previous.get(c.type), stamp) for c in decision.status.conditions]
        if conditions:
            status["conditions"] = [{k: v for k, v in condition_dict(c).items() if v is not None} for c in conditions]
        out[owner] = fitting(state.key.kind, status)
    return out


def composed(state: ResourceState) -> dict[str, Any]:
    """The fields no single owner holds: phase and message (precedence rules), observedGeneration."""
    status: dict[str, Any] = {}
    if state.key.kind in PHASED_KINDS:
        phase, message = state.phase()
        status["phase"] = phase
        if message:
            status["message"] = message
    observed = state.observed_generation()
    if observed is not None:
        status["observedGeneration"] = observed
    return fitting(state.key.kind, status)


def contained(wanted: Any, live: Any) -> bool:
    """Whether the live value already shows everything in `wanted` (conditions matched by type)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(contained(v, live.get(k)) for k, v in wanted.items())
    if isinstance(wanted, list) and all(isinstance(i, dict) and "type" in i for i in wanted):
        by_type = {i.get("type"): i for i in live or [] if isinstance(i, dict)} if isinstance(live, list) else {}
        return all(contained(i, by_type.get(i["type"])) for i in wanted)
    return bool(wanted == live)


def cleanup_done(state: ResourceState | None, deletion_requested_at: datetime | None, now: datetime) -> bool:
    """Whether Jetway's finalizer may go: no owner's decision still stands for objects in the
    cluster, or the grace period is over (a stuck cleanup must not keep the resource forever)."""
    if state is None:
        return True
    if deletion_requested_at is not None and now - deletion_requested_at >= CLEANUP_GRACE:
        return True
    return not any((d := state.decision(owner)) is not None and d.holds_objects() for owner in state.decisions)
