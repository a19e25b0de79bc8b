"""Routing records: one per routed request, why it went where it went (docs/router.md, "Routing records").

    router  --RoutingRecord batches (stored, stream JETWAY_ROUTING, bounded by age and size)-->  `jetway replay routing`,
                                                                                                 the console

A record names the client key by its name, never the key; the prompt by its block hashes (CRC-32 of each prefix,
services/router/policy.py), never its text; a session by a hash of its id. The stream is its own, apart from the
event log: a record is a measurement, many a second, bounded by age and bytes, not desired state.
"""

from __future__ import annotations

import msgspec

ROUTING_STREAM = "JETWAY_ROUTING"
ROUTING_PREFIX = "jetway.routing"  # a batch from one replica: jetway.routing.<replica token>
INFLIGHT_PREFIX = "jetway.inflight"  # a replica's requests in flight per member, ten times a second: jetway.inflight.<replica>
PLACEMENT_PREFIX = "jetway.placement"  # one decision, told to the other replicas at once: jetway.placement.<replica token>
PLACE_PREFIX = "jetway.place"  # a new conversation's decision, asked of the placer replica: jetway.place.<placer token>


class RoutingRecord(msgspec.Struct, frozen=True, omit_defaults=True, array_like=True, gc=False):
    """One routed request, as the router decided and saw it. Stored as a MessagePack array in the fields' order
    (new fields go last, with defaults; never reordered): a third of the bytes of JSON objects, encoded in a third of
    the time, on every request. A router fills in its own mutable copy of these fields as it routes
    (services/router/records.py `Record`), which MessagePack writes alike. Not tracked by the garbage collector: it
    holds no other object that could cycle."""

    at: float  # when the request arrived (seconds since the epoch)
    model: str
    status: int  # what the client was answered
    member: str = ""  # "" when no member took it (refused, none ready)
    candidates: tuple[str, ...] = ()  # the members that could take it when it was decided
    policy: str = ""
    reason: str = ""  # only, session, prefix, load, least-outstanding, round-robin
    score: float = 0.0
    prefix: float = 0.0  # the chosen member's share of the prompt's blocks, as the router's index had it
    blocks: tuple[int, ...] = ()  # the prompt's block hashes (never its text)
    block_chars: int = 0  # the block size the hashes were cut at
    session: int | None = None  # 64 bits of BLAKE2b of the session id (x-session-id or `user`), never the id
    key: str = ""  # the client key's name ("" with client keys off), never the key
    tokens_in: int = 0  # as the member's `usage` reported (0: not reported)
    tokens_out: int = 0
    ttft: float | None = None  # seconds to the first streamed event (None: not streamed)
    elapsed: float = 0.0  # seconds from arrival to the answer's end
    router: str = ""  # the replica that routed it
    placer: str = ""  # the replica that decided it for `router` (a new conversation among replicas), "" when `router` did


class Placement(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """Where one request was just sent, for the other router replicas' memory (services/router/learn.py): published
    when the router decides, not stored (the record, at the request's end, is what is kept)."""

    model: str
    member: str
    blocks: tuple[int, ...] = ()
    block_chars: int = 0
    session: int | None = None
    placed_by: str = ""  # the placer replica, when it decided this for the replica whose subject it is on

    @property
    def turn(self) -> int | None:
        """What the conversation's next turn finds this one by: its session, else its prompt's last block hash (the
        next turn's prompt starts with this one's); None with neither."""
        if self.session is not None:
            return self.session
        return self.blocks[-1] if self.blocks else None


class PlaceAsk(msgspec.Struct, frozen=True, array_like=True):
    """A new conversation's first decision, asked by a router replica of the placer (the replica with the least token
    among those alive, services/router/learn.py), which decides every replica's new conversations one after another
    as one router would, where replicas deciding a burst of them at once, each before hearing the others, spread them
    unevenly."""

    model: str
    asker: str  # the asking replica's token: the placement is counted as its request in flight
    candidates: tuple[str, ...]  # the members the asker may send it to (ready and fitting, as it sees them)
    blocks: tuple[int, ...] = ()
    block_chars: int = 0
    home: int | None = None
    session: int | None = None


class Placed(msgspec.Struct, frozen=True, array_like=True):
    """The placer's answer: the member and why (`member` "": none of the candidates; the asker decides itself)."""

    member: str = ""
    reason: str = ""
    score: float = 0.0
    prefix: float = 0.0


class InFlight(msgspec.Struct, frozen=True, array_like=True):
    """One router replica's requests in flight, per member (those with any), for the other replicas' load terms; and
    the turn whose end it says, when it says one (its placement's `turn`: its session, else its last block hash), so
    that another replica counts a conversation's previous turn out only while these counts still hold it."""

    members: tuple[tuple[str, int], ...] = ()
    ended: tuple[int, ...] = ()


BATCH = msgspec.msgpack.Encoder()  # a batch: a MessagePack array of records
_DECODER = msgspec.msgpack.Decoder(list[RoutingRecord])
_JSON_DECODER = msgspec.json.Decoder(list[dict[str, object]])


def decode_batch(payload: bytes) -> list[RoutingRecord]:
    """A stored batch's records; msgspec.DecodeError for a payload that is not one. Batches stored before 2026-12-06
    are JSON arrays of objects (they start with `[`, never a MessagePack array's first byte), still read."""
    if payload[:1] != b"[":
        return _DECODER.decode(payload)
    try:
        return [msgspec.convert(fields, RoutingRecord, from_attributes=False) for fields in _legacy(payload)]
    except msgspec.ValidationError as exc:
        raise msgspec.DecodeError(str(exc)) from exc


def _legacy(payload: bytes) -> list[list[object]]:
    """JSON objects as the arrays a record is now (the fields in order, defaults where absent)."""
    names = RoutingRecord.__struct_fields__
    defaults = dict(zip(names[len(names) - len(RoutingRecord.__struct_defaults__) :], RoutingRecord.__struct_defaults__, strict=True))
    return [[fields.get(name, defaults.get(name)) for name in names] for fields in _JSON_DECODER.decode(payload)]


def mentions(payload: bytes, model: str) -> bool:
    """Whether a stored batch may hold a record of `model` (its name as the batch writes it), without decoding it."""
    encoded = msgspec.json.encode(model) if payload[:1] == b"[" else msgspec.msgpack.encode(model)
    return encoded in payload
