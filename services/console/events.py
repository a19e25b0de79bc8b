"""Where an event lives, found by its id: the timeline's causation and correlation links, followed to any resource.

An event names its cause and its correlation root by id only (`Envelope.causation_id`, `correlation_id`), and
the cause is often another resource's event (a deployment's `ProviderSelected` caused by a provider's change).
`EventIndex` maps the id of each of the newest `bound` events the console folded to its stream sequence: fed by
`ConsoleService.fold` (handlers.py), so by the rebuild at start-up as by each event after it. `locate` answers
one id with where its event lives (kind, namespace, name, sequence), reading the event itself from the stream
by its sequence, so an event the stream let go since (each facet keeps its latest events only,
`JETWAY_HISTORY_PER_FACET`; a deleted resource's history is purged) is "no longer stored" rather than a link to nothing.

Past the bound, and for what a start-up from a snapshot did not replay, the index does not know an id: `locate`
then scans at most `SCAN_BOUND` events of the stream, those just before the event that names it (`before`: a
cause is always stored before its effect) and before the oldest the index holds. Further back it says not found.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.js.errors import APIError, NotFoundError

from contracts.events import Envelope, UndecodableEvent, decode
from contracts.kinds import KINDS, kind_of_token
from contracts.subjects import ALL_EVENTS, Key, parse_subject
from runtime.eventstore import EventStore, Item

DEFAULT_BOUND = 50_000  # ids held: about 8 MB (each id of 36 characters, its sequence, its entries in a dict and a deque)
SCAN_BOUND = 10_000  # events read from the stream, at most, for an id the index does not hold
EVENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # a uuid4 in practice; nothing that reaches a subject


def event_id(text: str) -> str:
    """An event id from a request's path; ValueError naming the field otherwise."""
    if not EVENT_ID.match(text):
        raise ValueError(f"id: expected an event id (letters, digits, '-', '_', '.', ':'; at most 128), got {text[:140]!r}")
    return text


class EventIndex:
    """Event id → stream sequence, for the newest `bound` events folded (the first folded go first)."""

    def __init__(self, bound: int = DEFAULT_BOUND) -> None:
        if bound < 1:
            raise ValueError(f"an event index holds at least one id, not {bound}")
        self.bound = bound
        self._seqs: dict[str, int] = {}
        self._order: deque[str] = deque()  # the ids in the order folded: the first goes first
        self.dropped = 0  # ids let go to stay within the bound
        self.scans = asyncio.Semaphore(2)  # stream scans for missing ids at once (each reads up to SCAN_BOUND events)

    def __len__(self) -> int:
        return len(self._seqs)

    def add(self, envelope: Envelope) -> None:
        """A folded event (one not stored yet, sequence 0, is not indexed)."""
        self.put(envelope.id, envelope.seq)

    def put(self, event_id: str, seq: int) -> None:
        if not seq:
            return
        seqs = self._seqs
        if event_id in seqs:  # folded again (the runner folds each sequence once): it keeps its place
            seqs[event_id] = seq
            return
        seqs[event_id] = seq
        order = self._order
        order.append(event_id)
        if len(order) > self.bound:
            del seqs[order.popleft()]
            self.dropped += 1

    def get(self, event_id: str) -> int | None:
        return self._seqs.get(event_id)

    def forget(self, event_id: str) -> None:
        """An id whose event the stream no longer has (rare: a lookup found it trimmed), out of the order too, so
        the order holds exactly the ids held."""
        if self._seqs.pop(event_id, None) is not None:
            self._order.remove(event_id)

    def oldest(self) -> int | None:
        """The sequence of the first event still held: before it, the index may not know an event."""
        return self._seqs[self._order[0]] if self._order else None

    def window(self, before: int | None, last: int, bound: int = SCAN_BOUND) -> tuple[int, int] | None:
        """The stream sequences (first, last, inclusive) to scan for an id the index does not hold: at most `bound`
        events, ending before `before` (the sequence of the event naming it: a cause is stored before its effect)
        and before the oldest event held (from there on the index would know it), within the stream's `last`.
        None when there is nothing to scan."""
        end = last
        if before is not None:
            end = min(end, before - 1)
        oldest = self.oldest()
        if oldest is not None:
            end = min(end, oldest - 1)
        if end < 1:
            return None
        return max(1, end - bound + 1), end


@dataclass(frozen=True)
class Found:
    """Where an event lives: its resource's timeline and its place in the stream."""

    id: str
    seq: int
    subject: str
    key: Key
    type: str
    via: str  # "index" or "scan"

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.key.kind,
            "namespace": self.key.namespace or None,
            "name": self.key.name,
            "seq": self.seq,
            "facet": self.subject.rsplit(".", 1)[-1],
            "type": self.type,
        }


@dataclass(frozen=True)
class Missing:
    """Why an id has no place to go (`status` and `code` for the API's error body)."""

    status: int
    message: str
    code: str = "not_found"


class _Hit(Exception):
    """The scan found the id: it stops there."""


def found_at(event_id: str, seq: int, subject: str, event_type: str, via: str) -> Found | Missing:
    """The event at `seq` on `subject` as the route answers it: a resource's, or why it has no timeline."""
    try:
        parsed = parse_subject(subject)
        key = Key(kind_of_token(parsed.kind_token), parsed.namespace, parsed.name)
        if key.kind not in KINDS:  # the cluster's discovery (contracts/cluster.py): no kind the API serves
            raise KeyError(key.kind)
    except (KeyError, ValueError):
        return Missing(404, f"event {event_id} (stream sequence {seq}, subject {subject}) is not about a resource: it has no timeline")
    return Found(event_id, seq, subject, key, event_type, via)


async def locate(index: EventIndex, store: EventStore, event_id: str, *, before: int | None = None) -> Found | Missing:
    """Where the event `event_id` lives: from the index (checked against the stream), else from a bounded scan."""
    try:
        seq = index.get(event_id)
        if seq is not None:
            try:
                msg = await store.js.get_msg(store.stream, seq=seq, direct=True)  # what a reader may ask (nats-auth.conf)
            except NotFoundError:
                index.forget(event_id)
                return Missing(
                    404,
                    f"event {event_id} (stream sequence {seq}) is no longer stored: each facet keeps its latest events only "
                    "(JETWAY_HISTORY_PER_FACET), and a deleted resource's history is purged",
                    "gone",
                )
            subject = msg.subject or ""
            try:
                envelope = decode(msg.data or b"", subject=subject, seq=seq)
            except UndecodableEvent:
                return found_at(event_id, seq, subject, "(unreadable)", "index")
            if envelope.id == event_id:
                return found_at(event_id, seq, subject, envelope.type, "index")
            index.forget(event_id)  # another event at that sequence: the stream was re-created since
        return await _scan(index, store, event_id, before)
    except (TimeoutError, nats.errors.Error, APIError) as exc:
        return Missing(503, f"the event stream did not answer ({type(exc).__name__}); try again shortly", "unavailable")


async def _scan(index: EventIndex, store: EventStore, event_id: str, before: int | None) -> Found | Missing:
    window = index.window(before, await store.stream_last_seq())
    if window is None:
        return Missing(404, f"no event {event_id} in the event stream")
    first, last = window
    hits: list[Item] = []

    def check(item: Item) -> None:
        if isinstance(item, Envelope) and item.id == event_id:
            hits.append(item)
            raise _Hit

    async with index.scans:
        with contextlib.suppress(_Hit):
            await store.scan(ALL_EVENTS, check, since_seq=first, until_seq=last)
    if not hits:
        return Missing(
            404,
            f"no event {event_id} in the event stream: not among the events the index holds ({len(index)}, the newest), "
            f"nor the {last - first + 1} stored before them (sequences {first} to {last}); it is older, or no longer stored",
        )
    hit = hits[0]
    assert isinstance(hit, Envelope)
    return found_at(event_id, hit.seq, hit.subject, hit.type, "scan")
