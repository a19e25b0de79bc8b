"""Rerunning a service's decisions: the recorded inputs fed to the installed code, offline.

`jetway replay --rerun SERVICE` (cli/history.py) reads the stream and hands it here with a fresh
instance of the service. The stream is folded into it in stream order, as its runner would fold
it. Each decision the service recorded (an event whose producer is the service) is compared with
what the installed code decides before that decision is folded; then the RECORDED decision is
folded, never the new one, so the history every later comparison sees is the history that happened.

The new decision is made in a trial: the service reconciled with `RecordingEffects`, which keeps
what the reconcile emits and appends nothing; where a reconcile records more than one decision, on a
deep copy that folds each (as `Effects.emit` folds it into the projection), since a later decision
may read an earlier one (`_trial`). Nothing leaves the process: writers are `DryWriter`s.

When is "before"? The runner folds a batch of events, then reconciles each affected resource, so
it decided from a view between the decision's cause (the event its `causation_id` names) and the
decision itself. Both ends are tried: the affected resources are reconciled right after the cause
is folded, and again just before the decision. A decision counts as unchanged when either end
decides it (transition times and the uid of a registration aside); a difference is shown against
the decision made right after the cause, where there is one. Level-triggered decisions (start-up,
resync) have no cause: only the view just before them is tried.
"""

from __future__ import annotations

import copy
import json
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from contracts.events import Envelope, Event, ResourceApplied, type_tag
from contracts.subjects import Key, facet_filter, matcher
from runtime.eventstore import EventStore
from runtime.service import Effects, Service

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "(absent)"})()
VOLATILE = ("uid", "created_at")  # a registration's fresh uid and time: never the same twice, never a decision


class Offline(Exception):
    """A reconcile asked for something only a running Jetway has."""


class DryWriter:
    """Writes nothing. `cluster` says whether decisions are made as in a cluster (the history came from one)."""

    def __init__(self, cluster: bool) -> None:
        self.cluster = cluster

    async def apply(self, owner: Key, objects: Sequence[dict[str, Any]], *, manager: str, deleted: bool = False) -> None:
        return None

    async def delete(self, objects: Sequence[dict[str, Any]], *, manager: str) -> None:
        return None

    async def run(self) -> None:
        return None


class RecordingEffects(Effects):
    """What a reconcile may do, kept instead of appended: the same `emit`, `level` and `cause` as Effects."""

    def __init__(self, service: Service, cause: Envelope | None, seq: int, at: datetime, *, fold: bool = True) -> None:
        # Effects.__init__ is not called on purpose: there is no runner, and nothing is appended.
        self.service = service
        self._fold = fold
        self.cause = cause
        self._seq = seq
        self._at = at
        self.emitted: list[Envelope] = []

    @property
    def store(self) -> EventStore:
        raise Offline(f"{self.service.name} reads the event store while deciding: it cannot be rerun offline")

    async def emit(self, key: Key, event: Event, *, facet: str | None = None) -> Envelope:
        envelope = Envelope(
            id=f"rerun-{self._seq}-{len(self.emitted)}",
            subject=key.subject(facet or self.service.name),
            producer=self.service.name,
            time=self._at,
            event=event,
            causation_id=self.cause.id if self.cause else None,
            correlation_id=(self.cause.correlation_id or self.cause.id) if self.cause else None,
            seq=self._seq,
            stored_at=self._at,
        )
        if self._fold:  # as Effects.emit folds it: the rest of this reconcile sees its own decision
            self.service.fold(envelope)
        self.emitted.append(envelope)
        return envelope


@dataclass(frozen=True)
class Change:
    path: str
    recorded: Any  # MISSING: the new decision has a field the recorded one had not
    new: Any  # MISSING: the other way round


@dataclass
class Comparison:
    """One recorded decision and what the installed code decides in its place."""

    recorded: Envelope
    new: Event | None  # None: the installed code records nothing here (the previous decision stands)
    changes: list[Change] = field(default_factory=list)
    error: str | None = None  # the installed code's reconcile failed

    @property
    def differs(self) -> bool:
        return bool(self.changes) or self.error is not None or self.new is None


@dataclass
class Outcome:
    comparisons: list[Comparison] = field(default_factory=list)
    folded: int = 0  # events the service consumes, folded
    fold_failures: int = 0  # events whose fold raised (the runner dead-letters those): skipped

    @property
    def differing(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.differs]


Trial = tuple[dict[str, deque[Event]], str | None]  # subject → what was decided on it, in order; the error, if any


def filters_of(service: Service) -> list[str]:
    """What the service's runner reads (runtime/service.py `Runner.filters`): what it consumes and its own facet."""
    return list(dict.fromkeys([*service.consumes, facet_filter(service.name)]))


def _dedupe(keys: Iterable[Key]) -> list[Key]:
    return list(dict.fromkeys(keys))


async def _reconcile_all(service: Service, keys: list[Key], cause: Envelope | None, seq: int, at: datetime, fold: bool) -> Trial:
    decided: dict[str, deque[Event]] = {}
    for key in keys:
        effects = RecordingEffects(service, cause, seq, at, fold=fold)
        try:
            await service.reconcile(key, effects)
        except Exception as exc:
            return decided, f"reconciling {key} failed: {type(exc).__name__}: {exc}"
        for envelope in effects.emitted:
            decided.setdefault(envelope.subject, deque()).append(envelope.event)
    return decided, None


async def _trial(service: Service, keys: list[Key], cause: Envelope | None, seq: int, at: datetime) -> Trial:
    """Reconcile `keys` in order as the runner would; what they would record, by subject. `service` is left as it was.

    First on the service itself, folding nothing: with at most one decision, nothing ran after a fold, so that is
    exactly what a runner decides (a reconcile changes the projection only through its decisions' folds). With
    more, again on a deep copy that folds each decision as `Effects.emit` does, since a later one may read an
    earlier one. Fields beside the projection (the selector's rule failures) are put back either way."""
    projection = service.projection()
    side = {name: value for name, value in vars(service).items() if projection is None or value is not projection}
    saved = copy.deepcopy(side)
    try:
        decided, error = await _reconcile_all(service, keys, cause, seq, at, fold=False)
        if error is None and sum(len(q) for q in decided.values()) <= 1:
            return decided, None
        copied = copy.copy(service)
        vars(copied).update(copy.deepcopy(saved))
        for name, value in vars(service).items():
            if name not in side:
                setattr(copied, name, copy.deepcopy(value))
        return await _reconcile_all(copied, keys, cause, seq, at, fold=True)
    finally:
        vars(service).update(saved)


async def rerun(service: Service, items: Iterable[Envelope], *, only: Callable[[Key], bool] | None = None) -> Outcome:
    """Fold `items` (stream order) into `service` and compare each decision it recorded with the installed code's.

    `only` limits which resources' decisions are compared (all are folded)."""
    wanted = matcher(filters_of(service))
    envelopes = [e for e in items if wanted.match(e.subject)]
    causes = {e.causation_id for e in envelopes if e.producer == service.name and e.causation_id}
    by_id: dict[str, Envelope] = {}
    affected: dict[str, list[Key]] = {}
    early: dict[str, Trial] = {}  # cause id → what the installed code decided right after the cause was folded
    outcome = Outcome()
    for envelope in envelopes:
        if envelope.producer == service.name and (only is None or only(envelope.key)):
            outcome.comparisons.append(await _compare(service, envelope, by_id, affected, early))
        try:
            service.fold(envelope)
        except Exception:
            outcome.fold_failures += 1
            continue
        outcome.folded += 1
        if envelope.producer == service.name or envelope.id not in causes:
            continue  # the runner does not reconcile its own decisions, echoed back
        by_id[envelope.id] = envelope
        affected[envelope.id] = keys = _dedupe(service.affected(envelope))
        early[envelope.id] = await _trial(service, keys, envelope, envelope.seq, _at(envelope))
    return outcome


def _at(envelope: Envelope) -> datetime:
    return envelope.stored_at or envelope.time or datetime.now(UTC)


async def _compare(
    service: Service, recorded: Envelope, by_id: dict[str, Envelope], affected: dict[str, list[Key]], early: dict[str, Trial]
) -> Comparison:
    subject, cause_id = recorded.subject, recorded.causation_id or ""
    first: Comparison | None = None
    if cause_id in early:
        decided, error = early[cause_id]
        queue = decided.get(subject)
        new = queue.popleft() if queue else None
        first = _against(recorded, new, error)
        if not first.differs:
            return first
    keys = _dedupe([*affected.get(cause_id, []), recorded.key])
    decided, error = await _trial(service, keys, by_id.get(cause_id), recorded.seq, _at(recorded))
    queue = decided.get(subject)
    late = _against(recorded, queue[0] if queue else None, error)
    if not late.differs:
        return late
    if first is not None and (first.new is not None or first.error is not None):
        return first
    return late


def _against(recorded: Envelope, new: Event | None, error: str | None) -> Comparison:
    if error is not None:
        return Comparison(recorded, new, error=error)
    if new is None:
        return Comparison(recorded, None)
    return Comparison(recorded, new, changes(recorded.event, new))


# --- differences ------------------------------------------------------------------------------


def plain(event: Event) -> dict[str, Any]:
    """The event as builtins, what is never the same twice left out."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    if isinstance(event, ResourceApplied):
        for name in VOLATILE:
            data.pop(name, None)
    return data


def _labels(items: list[Any]) -> list[str] | None:
    """How a list's items are told apart in a path: conditions by type, objects by kind/name, others by name."""
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    candidates: list[list[str]] = []
    if all(isinstance(i.get("type"), str) for i in items):
        candidates.append([i["type"] for i in items])
    names = [(i.get("metadata") or {}).get("name") if isinstance(i.get("metadata"), dict) else i.get("name") for i in items]
    if all(isinstance(i.get("kind"), str) for i in items) and all(isinstance(n, str) for n in names):
        candidates.append([f"{i['kind']}/{n}" for i, n in zip(items, names, strict=True)])
        namespaces = [((i.get("metadata") or {}).get("namespace") or "") for i in items]
        candidates.append([f"{i['kind']}/{ns}/{n}" for i, ns, n in zip(items, namespaces, names, strict=True)])
    if all(isinstance(n, str) for n in names):
        candidates.append([str(n) for n in names])
    return next((labels for labels in candidates if len(set(labels)) == len(labels)), None)


def flatten(value: Any, path: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Dotted path → leaf value; list items labelled (`status.conditions[Ready].reason`), transition times left out."""
    out = {} if out is None else out
    if isinstance(value, dict) and (value or not path):
        for name, item in value.items():
            flatten(item, f"{path}.{name}" if path else str(name), out)
    elif isinstance(value, list | tuple) and (labels := _labels(list(value))) is not None:
        for label, item in zip(labels, value, strict=True):
            flatten(item, f"{path}[{label}]", out)
    elif not path.endswith(".lastTransitionTime"):
        out[path] = value
    return out


def changes(recorded: Event, new: Event) -> list[Change]:
    """Field by field, in the recorded decision's order, then what only the new one has."""
    before, after = flatten(plain(recorded)), flatten(plain(new))
    paths = [*before, *(p for p in after if p not in before)]
    if "type" in paths:  # the event type first: everything else follows from it
        paths.remove("type")
        paths.insert(0, "type")
    found = []
    for path in paths:
        a, b = before.get(path, MISSING), after.get(path, MISSING)
        if a is MISSING or b is MISSING or a != b:
            found.append(Change(path, a, b))
    return found


def shown(value: Any, limit: int = 240) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(comparison: Comparison, service: str) -> list[str]:
    """The lines `jetway replay --rerun` prints for one differing decision."""
    recorded = comparison.recorded
    where = str(recorded.key) + ("" if recorded.facet == service else f" [{recorded.facet}]")
    new = type_tag(comparison.new) if comparison.new is not None else "nothing"
    lines = [f"{where}: seq {recorded.seq} recorded {recorded.type}, new {new}"]
    if comparison.error is not None:
        lines.append(f"  ! {comparison.error}")
    elif comparison.new is None:
        lines.append("  the installed code records no decision here (the previous one stands)")
    for change in comparison.changes:
        if change.recorded is not MISSING:
            lines.append(f"  - {change.path}: {shown(change.recorded)}")
        if change.new is not MISSING:
            lines.append(f"  + {change.path}: {shown(change.new)}")
    return lines


def as_json(comparison: Comparison) -> dict[str, Any]:
    recorded = comparison.recorded
    return {
        "resource": str(recorded.key),
        "facet": recorded.facet,
        "seq": recorded.seq,
        "recorded": recorded.type,
        "new": type_tag(comparison.new) if comparison.new is not None else None,
        "error": comparison.error,
        "changes": [
            {
                "path": c.path,
                **({"recorded": c.recorded} if c.recorded is not MISSING else {}),
                **({"new": c.new} if c.new is not MISSING else {}),
            }
            for c in comparison.changes
        ],
    }


__all__ = ["Change", "Comparison", "DryWriter", "Offline", "Outcome", "RecordingEffects", "changes", "flatten", "rerun"]
