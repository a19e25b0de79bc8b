"""A resource's history as the console's timeline shows it: one entry per event, and the state as of any.

The state as of an event is what `jetway replay KIND/NAME --until SEQ` prints: the resource's own events
folded up to that sequence (runtime/resources.py), nothing else read.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any

from contracts.events import Envelope, summary
from contracts.subjects import Key
from runtime.eventstore import Item, Undecodable
from runtime.resources import Resources

DEFAULT_PAGE = 200
MAX_PAGE = 1000


def entry(item: Item) -> dict[str, Any]:
    """One event as the timeline lists it (an unreadable one says why)."""
    if isinstance(item, Undecodable):
        return {"seq": item.seq, "subject": item.subject, "type": "(unreadable)", "summary": item.reason}
    moment = (item.stored_at or item.time).astimezone(UTC)
    return {
        "seq": item.seq,
        "id": item.id,
        "time": moment.isoformat().replace("+00:00", "Z"),
        "type": item.type,
        "facet": item.facet,
        "producer": item.producer,
        "summary": summary(item.event),
        "causation_id": item.causation_id,
        "correlation_id": item.correlation_id,
    }


def state_as_of(items: Iterable[Item], key: Key) -> dict[str, Any] | None:
    """The resource's manifest after folding `items` (its events up to a point), None when it did not exist then."""
    resources = Resources().fold_all(i for i in items if isinstance(i, Envelope))
    state = resources.items.get(key)
    return state.manifest() if state is not None else None


def page_size(text: str | None) -> int:
    """`?limit=`: a page of events, DEFAULT_PAGE when not given; ValueError naming the field otherwise."""
    if text is None or text == "":
        return DEFAULT_PAGE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise ValueError(f"limit: expected a whole number from 1 to {MAX_PAGE}, got {text!r}")
    return int(text)


def sequence(field: str, text: str | None) -> int | None:
    """`?after=` or `?until=`: a stream sequence, or None when not given; ValueError naming the field otherwise."""
    if text is None or text == "":
        return None
    if not text.isdigit() or int(text) > 2**63:
        raise ValueError(f"{field}: expected a stream sequence number, got {text!r}")
    return int(text)
