"""Events: the facts Jetway's services exchange, as frozen, versioned msgspec structs.

An event's `type` tag carries its version (`ResourceApplied.v1`). A breaking change adds a
new tag and the decoder keeps the old one, so a stream written by an older Jetway still
replays. The decoder is the only door into a service: anything it cannot read becomes an
`UndecodableEvent` with the reason, never an exception deep inside a handler.

Two families:
- desired state, on a resource's `spec` facet: `ResourceApplied`, `ResourceDeleted`;
- decisions, on the facet of the service that owns them. Every decision carries the slice of
  `status` it owns (`StatusSlice`: conditions, phase, fields), so a resource's status is the
  merge of the latest decision of each owner, whatever their types.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec

from contracts.kinds import kind_of_token
from contracts.subjects import Key, parse_subject


class StatusCondition(msgspec.Struct, frozen=True, omit_defaults=True):
    """metav1.Condition on the wire."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""
    lastTransitionTime: str = ""
    observedGeneration: int | None = None

    @classmethod
    def of(cls, type_: str, status: bool | str, reason: str, message: str, generation: int) -> StatusCondition:
        """A condition for a spec generation; `status` a bool, or "Unknown"."""
        text = status if isinstance(status, str) else ("True" if status else "False")
        return cls(type=type_, status=text, reason=reason, message=message, observedGeneration=generation)


class StatusSlice(msgspec.Struct, frozen=True, omit_defaults=True):
    """The part of a resource's status one owner writes."""

    conditions: tuple[StatusCondition, ...] = ()
    phase: str | None = None
    message: str | None = None
    fields: dict[str, Any] = {}


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    """Base of every event."""


# --- desired state -------------------------------------------------------------------------


class ResourceApplied(Event, frozen=True, tag="ResourceApplied.v1"):
    """A user applied a manifest (admitted and defaulted); its generation is the spec's version."""

    kind: str
    namespace: str
    name: str
    generation: int
    spec: dict[str, Any]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    uid: str = ""
    created_at: str = ""
    registered: bool = False  # recorded for a provider's self-registration (contracts/pipeline.py ProviderRegistered)


class ResourceDeleted(Event, frozen=True, tag="ResourceDeleted.v1"):
    kind: str
    namespace: str
    name: str


# --- decisions -----------------------------------------------------------------------------


class Decision(Event, frozen=True):
    """A service's decision about one resource, for one spec generation."""

    generation: int = 0
    status: StatusSlice = StatusSlice()

    @property
    def held(self) -> tuple[dict[str, Any], ...]:
        """The objects in a cluster that stand for this decision, as written or as references: what withdrawing
        it deletes (runtime/desired.py `withdraw`)."""
        return ()

    def holds_objects(self) -> bool:
        """Whether objects in a cluster stand for this decision (they must go before the resource does)."""
        return bool(self.held)


class StatusReported(Decision, frozen=True, tag="StatusReported.v1"):
    """An owner's observed status, with no decision beyond it."""


class Withdrawn(Decision, frozen=True, tag="Withdrawn.v1"):
    """An owner has nothing to say about a resource any more (it was deleted): its slice is cleared."""


EVENT_TYPES: list[type[Event]] = [ResourceApplied, ResourceDeleted, StatusReported, Withdrawn]


def register(*types: type[Event]) -> None:
    """Services' decision types join the union the decoder accepts (at import time)."""
    for event_type in types:
        if event_type not in EVENT_TYPES:
            EVENT_TYPES.append(event_type)
    _decoders.clear()


def type_tag(event: Event | type[Event]) -> str:
    cls = event if isinstance(event, type) else type(event)
    return str(cls.__struct_config__.tag)


# --- the envelope --------------------------------------------------------------------------


class TraceContext(msgspec.Struct, frozen=True, omit_defaults=True):
    traceparent: str = ""
    tracestate: str = ""


class Envelope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An event with where it came from and where it belongs.

    `subject` is the aggregate key; `seq` and `stored_at` are the stream's, filled on read.
    """

    id: str
    subject: str
    producer: str
    time: datetime
    event: Event
    causation_id: str | None = None
    correlation_id: str | None = None
    trace: TraceContext = TraceContext()
    seq: int = 0
    stored_at: datetime | None = None

    @property
    def type(self) -> str:
        return type_tag(self.event)

    @property
    def key(self) -> Key:
        parsed = parse_subject(self.subject)
        return Key(kind_of_token(parsed.kind_token), parsed.namespace, parsed.name)

    @property
    def facet(self) -> str:
        return self.subject.rsplit(".", 1)[-1]


class _WireEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    """The envelope as stored, its event left raw until the union decoder reads it."""

    id: str
    subject: str
    producer: str
    time: datetime
    event: msgspec.Raw
    causation_id: str | None = None
    correlation_id: str | None = None
    trace: TraceContext = TraceContext()


def new_envelope(
    subject: str,
    event: Event,
    *,
    producer: str,
    cause: Envelope | None = None,
    correlation_id: str | None = None,
    trace: TraceContext | None = None,
) -> Envelope:
    """A fresh envelope; a caused event inherits its cause's correlation id."""
    return Envelope(
        id=str(uuid.uuid4()),
        subject=subject,
        producer=producer,
        time=datetime.now(UTC),
        event=event,
        causation_id=cause.id if cause else None,
        correlation_id=correlation_id or (cause.correlation_id or cause.id if cause else None),
        trace=trace or TraceContext(),
    )


class UndecodableEvent(Exception):
    """A stored message that is not a Jetway event this version can read."""

    def __init__(self, reason: str, subject: str = "", seq: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.subject = subject
        self.seq = seq


_encoder = msgspec.json.Encoder()
_wire_decoder = msgspec.json.Decoder(_WireEnvelope)
_decoders: dict[str, Any] = {}


# Modules whose decision types join the union: whoever decodes (a service, the CLI) reads
# every type, whichever modules it happened to import itself.
EVENT_MODULES = (
    "contracts.gateway",
    "contracts.router",
    "contracts.pipeline",
    "contracts.cluster",
    "contracts.binding",
    "contracts.scaling",
)


def _event_decoder() -> Any:
    if "event" not in _decoders:
        import importlib

        for module in EVENT_MODULES:
            importlib.import_module(module)
        union: Any = EVENT_TYPES[0]
        for event_type in EVENT_TYPES[1:]:
            union = union | event_type
        _decoders["event"] = msgspec.json.Decoder(union)
    return _decoders["event"]


def encode(envelope: Envelope) -> bytes:
    return _encoder.encode(envelope)


def decode(data: bytes, *, subject: str = "", seq: int = 0, stored_at: datetime | None = None) -> Envelope:
    """Bytes from the stream → an Envelope; UndecodableEvent with the reason when it is not one."""
    try:
        wire = _wire_decoder.decode(data)
        event = _event_decoder().decode(wire.event)
    except msgspec.ValidationError as exc:
        raise UndecodableEvent(f"not a Jetway event: {exc}", subject, seq) from None
    except msgspec.DecodeError as exc:
        raise UndecodableEvent(f"malformed event payload: {exc}", subject, seq) from None
    if subject and wire.subject != subject:
        raise UndecodableEvent(f"event claims subject {wire.subject!r} but was stored on {subject!r}", subject, seq)
    return Envelope(
        id=wire.id,
        subject=wire.subject,
        producer=wire.producer,
        time=wire.time,
        event=event,
        causation_id=wire.causation_id,
        correlation_id=wire.correlation_id,
        trace=wire.trace,
        seq=seq,
        stored_at=stored_at,
    )


def summary(event: Event) -> str:
    """One line a human reads in `jetway events`."""
    if isinstance(event, ResourceApplied):
        return f"generation {event.generation}"
    if isinstance(event, ResourceDeleted):
        return "deleted"
    if isinstance(event, Decision):
        parts = [f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "") for c in event.status.conditions]
        extra = getattr(event, "describe", None)
        head = extra() if callable(extra) else ""
        phase = f"phase {event.status.phase}" if event.status.phase else ""
        return "; ".join(p for p in (head, phase, ", ".join(parts)) if p)
    return ""
