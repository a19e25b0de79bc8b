"""A resource's history as the console's timeline shows it: one entry per event, the state as of any, and
what changed between two of them.

The state as of an event is what `jetway replay KIND/NAME --until SEQ` prints: the resource's own events
folded up to that sequence (runtime/resources.py), nothing else read. The diff between two points compares
two such states field by field (`diff`), as plain data.
"""

from __future__ import annotations

import json
import re
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


def compare(items: Iterable[Item], key: Key, since: int, until: int) -> dict[str, Any]:
    """The state as of `until` and what changed since `since` (either may be the earlier), from one read of
    the resource's events up to the later of the two."""
    events = list(items)
    before = state_as_of((i for i in events if i.seq <= since), key)
    after = state_as_of((i for i in events if i.seq <= until), key)
    return {"state": after, "since": since, "existed_since": before is not None, "changes": diff(before, after)}


PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
IDENTITY_KEYS = ("type", "name")  # a list of dicts each with a distinct one of these is matched by it, not by index


def diff(before: Any, after: Any) -> list[dict[str, Any]]:
    """What changed from `before` to `after` (JSON values: a state, None when the resource did not exist).

    One entry per field that differs: `{"path", "change": "added" | "removed" | "changed", "old", "new"}` (no
    `old` for an added field, no `new` for a removed one). A path is dotted (`spec.replicas`); a key that is not
    a plain word is quoted (`metadata.annotations["airunway.ai/health"]`); a list item is its index (`args[0]`),
    or, in a list of objects each with a distinct `type` (conditions) or `name`, that key (`conditions[type=Ready]`),
    so a condition that moved is not a change. A field whose value changed kind (object to list, number to
    text) is one change with both values whole. Order is stable: the fields of `before` in their order, then
    those only in `after` in theirs, depth first.
    """
    changes: list[dict[str, Any]] = []
    _walk("", {} if before is None else before, {} if after is None else after, changes)
    return changes


def _walk(path: str, old: Any, new: Any, changes: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for name, value in old.items():
            if name in new:
                _walk(_field(path, name), value, new[name], changes)
            else:
                changes.append({"path": _field(path, name), "change": "removed", "old": value})
        for name, value in new.items():
            if name not in old:
                changes.append({"path": _field(path, name), "change": "added", "new": value})
    elif isinstance(old, list) and isinstance(new, list):
        identity = _identity(old, new)
        if identity is None:
            for index in range(max(len(old), len(new))):
                at = f"{path}[{index}]"
                if index >= len(new):
                    changes.append({"path": at, "change": "removed", "old": old[index]})
                elif index >= len(old):
                    changes.append({"path": at, "change": "added", "new": new[index]})
                else:
                    _walk(at, old[index], new[index], changes)
        else:
            olds = {item[identity]: item for item in old}
            news = {item[identity]: item for item in new}
            for ident, item in olds.items():
                at = f"{path}[{identity}={ident}]"
                if ident in news:
                    _walk(at, item, news[ident], changes)
                else:
                    changes.append({"path": at, "change": "removed", "old": item})
            for ident, item in news.items():
                if ident not in olds:
                    changes.append({"path": f"{path}[{identity}={ident}]", "change": "added", "new": item})
    elif not _same(old, new):
        changes.append({"path": path, "change": "changed", "old": old, "new": new})


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON values: `True` is not `1` (Python says it is), `1` is `1.0`."""
    if isinstance(old, bool) or isinstance(new, bool):
        return type(old) is type(new) and old == new
    numbers = isinstance(old, int | float) and isinstance(new, int | float)
    return (type(old) is type(new) or numbers) and old == new


def _identity(old: list[Any], new: list[Any]) -> str | None:
    """The key that names every item of both lists (all objects, each with a distinct text value of it), if any."""
    items = old + new
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in IDENTITY_KEYS:
        if all(isinstance(i.get(key), str) for i in items) and all(len({i[key] for i in side}) == len(side) for side in (old, new)):
            return key
    return None


def _field(path: str, name: str) -> str:
    step = name if PLAIN_KEY.match(name) else f"[{json.dumps(name)}]"
    if not path:
        return step
    return f"{path}.{step}" if PLAIN_KEY.match(name) else f"{path}{step}"


def page_size(text: str | None) -> int:
    """`?limit=`: a page of events, DEFAULT_PAGE when not given; ValueError naming the field otherwise."""
    if text is None or text == "":
        return DEFAULT_PAGE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise ValueError(f"limit: expected a whole number from 1 to {MAX_PAGE}, got {text!r}")
    return int(text)


def sequence(field: str, text: str | None) -> int | None:
    """`?after=`, `?until=` or `?since=`: a stream sequence, or None when not given; ValueError naming the field otherwise."""
    if text is None or text == "":
        return None
    if not text.isdigit() or int(text) > 2**63:
        raise ValueError(f"{field}: expected a stream sequence number, got {text!r}")
    return int(text)
