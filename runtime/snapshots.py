"""Snapshots of a service's projection, so a restart replays only the events after the last one.

One mechanism for every service (docs/event-store.md, "Snapshots"):

- **What.** `Service.projection()`: a dataclass (or msgspec Struct) whose fields are dataclasses,
  msgspec Structs (events, envelopes: polymorphic fields are read back by their tag), pydantic models,
  NamedTuples, builtins and the containers of them. A field named in the projection's `snapshot_skip`
  is live, per-process state (the router's traffic counters) and is never stored. Anything else (a
  secret store, a client) refuses to encode: it fails the snapshot, it is never written.
- **Which version.** The projection declares `snapshot_version` (bump it when what its fold means
  changes); the snapshot also records a fingerprint of the projection's shape (field names and types,
  recursively), so a shape changed without a bump is caught as well. Either differing: the snapshot
  is ignored with a log line, and the service replays from the start.
- **Which sequence.** `covered` is, for each filter the runner follows (every event, or its partition
  and the global one), the stream sequence through which every event of it was folded (the runner's
  in-order watermarks), and `seen` the runner's per-subject watermark: a decision the service folded
  ahead of the consumer (its own append) is not folded twice when the tail is replayed.
- **Where.** A NATS object store per service, `jetway-snapshots-<service>`, one object per scope:
  `projection` for a runner of every event, `projection-<partition>` for a shard (runtime/replica.py),
  so whichever replica holds a partition next starts from its snapshot. A projection outgrows one NATS
  message (1 MiB by default), and the object store chunks it; one bucket per service lets each
  service's NATS user reach its own bucket only (contracts/natsauth.py).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import enum
import functools
import hashlib
import importlib
import logging
import types
import typing
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
import pydantic
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError
from nats.js.object_store import ObjectStore

from runtime import metrics, settings
from runtime.bus import more_copies, with_copies

log = logging.getLogger("jetway.snapshots")

FORMAT = 2  # the layout of `Snapshot` itself (2: `covered` per followed filter)
OBJECT = "projection"
BUCKET_PREFIX = "jetway-snapshots-"
PLACEMENT_WAIT = 30.0  # seconds a forming cluster is given to place a new store's three copies (as the lease bucket)


def bucket_of(runner: str) -> str:
    return f"{BUCKET_PREFIX}{runner}"


# --- settings -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SnapshotSettings:
    """When a runner writes a snapshot: after `every_events` folded events, or `every_seconds` after the
    last one when anything was folded since. `enabled=False`: never written, never read."""

    enabled: bool = settings.Snapshots().enabled
    every_events: int = settings.Snapshots().every_events
    every_seconds: float = settings.Snapshots().every_seconds

    @classmethod
    def of(cls, snapshots: settings.Snapshots) -> SnapshotSettings:
        """From the settings tree: JETWAY_SNAPSHOTS, JETWAY_SNAPSHOT_EVERY_EVENTS, JETWAY_SNAPSHOT_EVERY_SECONDS."""
        return cls(snapshots.enabled, snapshots.every_events, snapshots.every_seconds)


@functools.cache
def settings_from_env() -> SnapshotSettings:
    """The process's settings (runtime/settings.py), read once."""
    return SnapshotSettings.of(settings.process().snapshots)


# --- the codec ----------------------------------------------------------------------------------


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, pydantic.BaseModel):
        # what was set, by alias: validating it again gives the same model (and the same fields_set)
        return obj.model_dump(mode="json", by_alias=True, exclude_unset=True)
    raise TypeError(f"{type(obj).__qualname__} cannot go into a snapshot")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
Revive = Callable[[Any], Any]


def _dec_hook(tp: type, obj: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return tp.model_validate(obj)
    raise TypeError(f"{tp!r} cannot come out of a snapshot")


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _concrete(tp: type[msgspec.Struct]) -> list[type[msgspec.Struct]]:
    """A Struct class and every subclass of it that is tagged (an event base: each event type)."""
    found = [tp] if tp.__struct_config__.tag is not None else []
    for sub in tp.__subclasses__():
        found += [c for c in _concrete(sub) if c not in found]
    return found


def _events_loaded() -> None:
    from contracts import events

    for module in events.EVENT_MODULES:  # every decision type registered, as the event decoder does
        importlib.import_module(module)


class _Types:
    """Type-directed reading of msgpack-decoded builtins back into the projection's types, and the shape
    fingerprint. Built once per projection type."""

    def __init__(self) -> None:
        self._revivers: dict[Any, Revive] = {}
        self._plain: dict[Any, bool] = {}

    # whether msgspec.convert reads the type on its own (no polymorphic Struct, no NamedTuple key inside)
    def plain(self, tp: Any, stack: frozenset[Any] = frozenset()) -> bool:
        if tp in self._plain:
            return self._plain[tp]
        if tp in stack:
            return True
        stack = stack | {tp}
        origin = typing.get_origin(tp)
        if origin is not None and dataclasses.is_dataclass(origin):  # a generic dataclass, parameterised
            result = False
        elif origin is not None:
            result = all(self.plain(a, stack) for a in typing.get_args(tp) if a is not Ellipsis)
            if origin is dict and typing.get_args(tp) and not _hashable_plain(typing.get_args(tp)[0]):
                result = False
        elif _is_struct(tp):
            result = _concrete(tp) in ([tp], []) and all(self.plain(f.type, stack) for f in msgspec.structs.fields(tp))
        elif dataclasses.is_dataclass(tp) or _is_namedtuple(tp) or tp is object:  # msgspec has no `object`
            result = False
        else:
            result = True
        self._plain[tp] = result
        return result

    def reviver(self, tp: Any) -> Revive:
        found = self._revivers.get(tp)
        if found is None:
            self._revivers[tp] = lambda obj: self._revivers[tp](obj)  # recursive types resolve late
            found = self._revivers[tp] = self._build(tp)
        return found

    def _build(self, tp: Any) -> Revive:
        if tp is Any or tp is object:
            return _same
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Union or origin is types.UnionType:
            options = [a for a in args if a is not type(None)]
            if len(options) == 1:
                inner = self.reviver(options[0])
                return lambda obj: None if obj is None else inner(obj)
            if all(_is_struct(o) for o in options):
                tagged = self._tagged([c for o in options for c in _concrete(o)])
                return (lambda obj: None if obj is None else tagged(obj)) if len(options) < len(args) else tagged
        if self.plain(tp):
            return functools.partial(_convert, tp)
        if origin in (dict, Mapping) or tp is dict:
            key, value = (self.reviver(a) for a in (args or (Any, Any)))
            return lambda obj: {key(k): value(v) for k, v in obj.items()}
        if origin in (list, set, frozenset):
            item, make = self.reviver(args[0]), origin
            return lambda obj: make(item(v) for v in obj)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                item = self.reviver(args[0])
                return lambda obj: tuple(item(v) for v in obj)
            items = [self.reviver(a) for a in args]
            return lambda obj: tuple(f(v) for f, v in zip(items, obj, strict=True))
        if _is_namedtuple(tp):
            hints = typing.get_type_hints(tp)
            fields = [self.reviver(hints[name]) for name in tp._fields]
            return lambda obj: tp(*(f(v) for f, v in zip(fields, obj, strict=True)))
        if _is_struct(tp):
            concrete = _concrete(tp)
            if concrete not in ([tp], []):
                return self._tagged(concrete)
            return self._struct(tp)
        if dataclasses.is_dataclass(origin or tp):
            return self._dataclass(tp)
        raise TypeError(f"{tp!r} cannot come out of a snapshot")

    def _struct(self, tp: Any) -> Revive:
        fields = {f.encode_name: (f.name, self.reviver(f.type)) for f in msgspec.structs.fields(tp)}

        def revive(obj: Any) -> Any:
            return tp(**{fields[k][0]: fields[k][1](v) for k, v in obj.items() if k in fields})

        return revive

    def _tagged(self, concrete: list[type[msgspec.Struct]]) -> Revive:
        by_tag = {c.__struct_config__.tag: c for c in concrete}
        tag_field = concrete[0].__struct_config__.tag_field

        def revive(obj: Any) -> Any:
            cls = by_tag.get(obj.get(tag_field)) if isinstance(obj, dict) else None
            if cls is None:
                raise ValueError(f"no event type {obj.get(tag_field) if isinstance(obj, dict) else obj!r}")
            return self.reviver(cls)(obj)

        return revive

    def _dataclass(self, tp: Any) -> Revive:
        hints = _hints(tp)
        make = typing.get_origin(tp) or tp
        fields = {f.name: (f.init, self.reviver(hints[f.name])) for f in dataclasses.fields(make)}

        def revive(obj: Any) -> Any:
            values = {name: fields[name][1](v) for name, v in obj.items() if name in fields}
            made = make(**{n: v for n, v in values.items() if fields[n][0]})
            for name, value in values.items():
                if not fields[name][0]:
                    setattr(made, name, value)
            return made

        return revive

    # --- the fingerprint ---
    def describe(self, tp: Any, stack: frozenset[Any] = frozenset()) -> str:
        if tp in stack:
            return getattr(tp, "__qualname__", repr(tp))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is not None and dataclasses.is_dataclass(origin):
            name = f"{origin.__module__}.{getattr(origin, '__qualname__', '')}[{','.join(self.describe(a, stack) for a in args)}]"
            hints, within = _hints(tp), stack | {tp}
            return name + "{" + ",".join(f"{f.name}:{self.describe(hints[f.name], within)}" for f in dataclasses.fields(origin)) + "}"
        if origin is not None:
            inner = ",".join("..." if a is Ellipsis else self.describe(a, stack) for a in args)
            return f"{getattr(origin, '__name__', repr(origin))}[{inner}]"
        stack = stack | {tp}
        name = f"{getattr(tp, '__module__', '')}.{getattr(tp, '__qualname__', repr(tp))}"
        if _is_struct(tp):
            return name + "{" + ",".join(f"{f.encode_name}:{self.describe(f.type, stack)}" for f in msgspec.structs.fields(tp)) + "}"
        if dataclasses.is_dataclass(tp) or _is_namedtuple(tp):
            hints = _hints(tp)
            names = tp._fields if _is_namedtuple(tp) else [f.name for f in dataclasses.fields(tp)]
            return name + "{" + ",".join(f"{n}:{self.describe(hints[n], stack)}" for n in names) + "}"
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            schema = msgspec.json.encode(tp.model_json_schema(by_alias=True), order="sorted")
            return f"{name}#{hashlib.sha256(schema).hexdigest()[:16]}"
        return name


def _same(obj: Any) -> Any:
    return obj


def _convert(tp: Any, obj: Any) -> Any:
    return msgspec.convert(obj, tp, dec_hook=_dec_hook)


def _hints(tp: Any) -> dict[str, Any]:
    """The field types of a class, with the type variables of its generic bases (`Deployment(Desired[ModelDeployment])`)
    and its own parameters (`Desired[ModelDeployment]`) resolved."""
    origin = typing.get_origin(tp) or tp
    bound: dict[Any, Any] = {}
    for klass in reversed(origin.__mro__):
        for base in getattr(klass, "__orig_bases__", ()):
            params = getattr(typing.get_origin(base), "__parameters__", ())
            bound.update(zip(params, (_bind(a, bound) for a in typing.get_args(base)), strict=False))
    if origin is not tp:
        bound.update(zip(origin.__parameters__, typing.get_args(tp), strict=True))
    hints = typing.get_type_hints(origin)
    return {name: _bind(hint, bound) for name, hint in hints.items()} if bound else hints


def _bind(tp: Any, bound: dict[Any, Any]) -> Any:
    if isinstance(tp, typing.TypeVar):
        return bound.get(tp, tp)
    params = getattr(tp, "__parameters__", ())
    return tp[tuple(bound.get(p, p) for p in params)] if params and any(p in bound for p in params) else tp


def _is_namedtuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _hashable_plain(tp: Any) -> bool:
    return tp in (str, int, float, bool, bytes) or (isinstance(tp, type) and issubclass(tp, enum.Enum)) or tp is Any


class Snapshot(msgspec.Struct, kw_only=True):
    """What is stored: the projection's fields (`state`, read once the rest says it is ours) and where it stands."""

    format: int
    runner: str
    version: int
    fingerprint: str
    seq: int  # the highest of `covered`
    covered: dict[str, int]  # followed filter (`*`, or a partition) → every event of it up to here is folded into `state`
    seen: dict[str, int]  # subject → its last folded sequence (some may be past `seq`)
    stream_created: str  # the event stream's creation time: a stream made again restarts its sequences
    written_at: datetime
    state: msgspec.Raw


class Unusable(Exception):
    """A stored snapshot this code does not read (another version or shape, or bytes that do not decode)."""


@dataclasses.dataclass
class Restored:
    seq: int
    seen: dict[str, int]
    written_at: datetime
    events_since: int = 0


class Codec:
    """Encodes one projection's fields (less its `snapshot_skip`) and reads them back into it, in place."""

    def __init__(self, projection: Any) -> None:
        self.type = type(projection)
        _events_loaded()
        self.version = int(getattr(self.type, "snapshot_version", 1))
        skip = set(getattr(self.type, "snapshot_skip", ()))
        hints = _hints(self.type)
        if dataclasses.is_dataclass(self.type):
            names = [f.name for f in dataclasses.fields(self.type)]
        elif _is_struct(self.type):
            names = list(self.type.__struct_fields__)
        else:
            raise TypeError(f"a projection is a dataclass or a msgspec Struct, not {self.type.__qualname__}")
        self.fields = [n for n in names if n not in skip]
        types_ = _Types()
        self._revive = {n: types_.reviver(hints[n]) for n in self.fields}
        shape = ";".join(f"{n}:{types_.describe(hints[n])}" for n in self.fields)
        self.fingerprint = hashlib.sha256(f"{self.type.__module__}.{self.type.__qualname__}|{shape}".encode()).hexdigest()[:32]

    def encode(
        self, projection: Any, *, runner: str, seq: int, covered: dict[str, int], seen: dict[str, int], stream_created: str
    ) -> bytes:
        """The snapshot's bytes, taken now (synchronously: no fold can run in between)."""
        state = msgspec.Raw(_encoder.encode({n: getattr(projection, n) for n in self.fields}))
        snapshot = Snapshot(
            format=FORMAT,
            runner=runner,
            version=self.version,
            fingerprint=self.fingerprint,
            seq=seq,
            covered=covered,
            seen=seen,
            stream_created=stream_created,
            written_at=datetime.now(UTC),
            state=state,
        )
        return _encoder.encode(snapshot)

    def header(self, data: bytes) -> Snapshot:
        try:
            snapshot = msgspec.msgpack.decode(data, type=Snapshot)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Unusable(f"not a snapshot: {exc}") from None
        if snapshot.format != FORMAT or snapshot.version != self.version or snapshot.fingerprint != self.fingerprint:
            raise Unusable(
                f"written for projection version {snapshot.version} (shape {snapshot.fingerprint[:8]}, format {snapshot.format}); "
                f"this code is version {self.version} (shape {self.fingerprint[:8]}, format {FORMAT})"
            )
        return snapshot

    def restore(self, snapshot: Snapshot, into: Any) -> None:
        """Read the snapshot's state and, only if all of it reads, put it into the projection `into`."""
        try:
            raw = msgspec.msgpack.decode(snapshot.state)
            values = {n: self._revive[n](raw[n]) for n in self.fields}
        except Exception as exc:  # msgspec, pydantic, a missing field, an unknown event type: all the same to us
            raise Unusable(f"its state does not decode: {type(exc).__name__}: {exc}") from None
        for name, value in values.items():
            setattr(into, name, value)


# --- the store ----------------------------------------------------------------------------------


class SnapshotStore:
    """One runner's snapshots: the object `projection` (or `projection-<partition>`, a shard's) in the object
    store `jetway-snapshots-<service>`."""

    def __init__(self, js: JetStreamContext, runner: str, partition: str | None = None) -> None:
        self.js = js
        self.bucket = bucket_of(runner)
        self.object = OBJECT if partition is None else f"{OBJECT}-{partition}"
        self.stream = f"OBJ_{self.bucket}"
        self._store: ObjectStore | None = None
        self._written = metrics.SNAPSHOTS_WRITTEN.labels(runner)  # `runner` is the service's name

    async def _bucket(self) -> ObjectStore:
        """The store, made on first use with the event streams' copies (three on a cluster): a snapshot that lived on
        one node would be lost with it, and every shard of the service would replay from the start."""
        if self._store is None:
            try:
                self._store = await self.js.object_store(self.bucket)
            except NotFoundError:
                self._store = await self._create()
            else:
                await more_copies(self.js, self.stream, f"bucket {self.bucket}")
        return self._store

    async def _create(self) -> ObjectStore:
        async def create(replicas: int) -> ObjectStore:
            config = api.ObjectStoreConfig(
                bucket=self.bucket, description="the runner's projection, and the stream sequence it covers", replicas=replicas
            )
            return await self.js.create_object_store(self.bucket, config)

        try:
            return await with_copies(create, f"bucket {self.bucket}", deadline=asyncio.get_running_loop().time() + PLACEMENT_WAIT)
        except APIError as exc:
            if exc.err_code != 10058:  # made meanwhile by another replica or shard
                raise
            return await self.js.object_store(self.bucket)

    async def put(self, data: bytes) -> None:
        await (await self._bucket()).put(self.object, data)
        self._written.inc()

    async def get(self, timeout: float = 60.0) -> bytes | None:
        """The stored bytes, None when there is none; an exception when they cannot be read whole."""
        store = await self._bucket()
        try:
            info = await store.get_info(self.object)
        except NotFoundError:
            return None
        if not info.size:
            return b""
        # nats-py's ObjectStore.get looks the stream up by subject (a right to list every stream): read the
        # chunks through an ordered consumer on our own stream instead, and check the digest as it does.
        digest = hashlib.sha256()
        chunks: list[bytes] = []
        sub = await self.js.subscribe(f"$O.{self.bucket}.C.{info.nuid}", stream=self.stream, ordered_consumer=True)
        try:
            while True:
                msg = await sub.next_msg(timeout=timeout)
                chunks.append(msg.data)
                digest.update(msg.data)
                if msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
        expected = base64.urlsafe_b64decode((info.digest or "").split("=", 1)[-1] or "")
        if digest.digest() != expected:
            raise Unusable("its chunks do not match its digest")
        return b"".join(chunks)
