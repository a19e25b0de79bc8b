"""When a deleted resource's history goes, decided purely (the watcher purges it: docs/event-store.md).

A resource's subjects are purged once it has been deleted for the grace period and nothing stands for it any
more: no facet's last event is a decision that holds objects in a cluster (an owner that has not withdrawn yet
would lose, in a rebuild, the record of what it must delete). Until then its history stays, as any other's.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from contracts.events import Decision, Envelope, ResourceDeleted
from contracts.subjects import SPEC
from runtime.eventstore import Item


def _last(history: list[Item]) -> dict[str, Envelope]:
    """Each facet's last event."""
    return {item.facet: item for item in history if isinstance(item, Envelope)}


def aged(envelope: Envelope, now: datetime, grace: float) -> bool:
    """Whether an event was stored at least `grace` seconds before `now`."""
    return (envelope.stored_at or envelope.time) + timedelta(seconds=grace) <= now


def purgeable(history: list[Item], now: datetime, grace: float) -> bool:
    """Whether a resource's history (every facet, in stream order) may be purged now."""
    last = _last(history)
    spec = last.get(SPEC)
    if spec is None or not isinstance(spec.event, ResourceDeleted) or not aged(spec, now, grace):
        return False  # not deleted (or applied again since), or not long enough ago
    return not any(isinstance(e.event, Decision) and e.event.holds_objects() for e in last.values())
