"""The bus: a NATS connection that survives restarts, and the streams Jetway needs.

Streams are created idempotently at start-up, by every service: creating one that exists
with the same settings is a no-op, and changed settings (replicas, limits) are updated.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.errors import BadSubjectError
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, KeyValueConfig, RetentionPolicy, StorageType, StreamConfig, StreamInfo
from nats.js.errors import APIError, BadRequestError, BucketNotFoundError, NotFoundError, ServiceUnavailableError
from nats.js.kv import KeyValue
from nats.protocol.command import pub_cmd

from contracts.natsauth import inbox_prefix
from contracts.subjects import ALL_EVENTS, DLQ_PREFIX
from runtime import settings

log = logging.getLogger("jetway.bus")

EVENTS_STREAM = "JETWAY_EVENTS"
DLQ_STREAM = "JETWAY_DLQ"
DUPLICATE_WINDOW = 120.0  # seconds in which a repeated Nats-Msg-Id is absorbed
REPLICATED = 3  # a stream's copies on a cluster: one node may fail and a majority still stands
LEADER_WAIT = 15.0  # seconds a stream whose copies changed is given to elect a leader
# The server's answers to "place 3 replicas" on a single server or too small a cluster.
CANNOT_REPLICATE = {10074, 10023, 10005}  # replicas not supported non-clustered; insufficient resources; no peers
NOT_CLUSTERED = 10074  # the only one of them that is final: the others are also what a cluster still forming says
STREAMS_UNAVAILABLE = 10008  # JetStream not ready yet (a cluster electing its meta leader)
# Events kept per facet (subject): JetStream's max_msgs_per_subject drops a facet's oldest event
# when a new one passes the count, so the latest of every facet is always kept.
HISTORY_PER_FACET = settings.Streams().history_per_facet  # JETWAY_HISTORY_PER_FACET
# A deleted resource's subjects are purged this long after its deletion, once nothing stands for it.
DELETED_GRACE = settings.Streams().deleted_history  # JETWAY_DELETED_HISTORY_SECONDS


@dataclass(frozen=True)
class StreamSettings:
    """Retention and placement; docs/event-store.md explains each choice."""

    # 0: as the server allows, 3 on a NATS cluster of three or more nodes, else 1 (ensure_streams
    # asks for 3 and the server says whether it can place them); an existing stream keeps its count.
    replicas: int = 0
    # the latest `history_per_facet` events of every facet are kept; -1 keeps every event
    history_per_facet: int = HISTORY_PER_FACET
    max_bytes: int = -1  # no cap unless an operator sets one (a cap drops the oldest events, latest ones too)
    max_age: float = 0.0  # seconds; 0 keeps events forever (an age drops a facet's latest event too)
    dlq_max_age: float = 14 * 24 * 3600.0
    # seconds after its deletion a resource's history is purged (the watcher does it); 0: kept forever
    deleted_grace: float = DELETED_GRACE

    @classmethod
    def of(cls, streams: settings.Streams) -> StreamSettings:
        """From the settings tree (JETWAY_HISTORY_PER_FACET, JETWAY_DELETED_HISTORY_SECONDS)."""
        return cls(history_per_facet=streams.history_per_facet, deleted_grace=streams.deleted_history)

    def events(self) -> StreamConfig:
        return StreamConfig(
            name=EVENTS_STREAM,
            description="Jetway's event log: desired state and every service's decisions",
            subjects=[ALL_EVENTS],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=self.replicas or REPLICATED,
            max_bytes=self.max_bytes,
            max_age=self.max_age,
            max_msgs_per_subject=self.history_per_facet,
            discard=DiscardPolicy.OLD,
            duplicate_window=DUPLICATE_WINDOW,
            allow_direct=True,
            deny_delete=True,
            deny_purge=False,  # an operator may compact history deliberately; a service never does
        )

    def dead_letters(self) -> StreamConfig:
        return StreamConfig(
            name=DLQ_STREAM,
            description="Events a service could not handle, with the reason, for an operator to inspect",
            subjects=[f"{DLQ_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=self.replicas or REPLICATED,
            max_age=self.dlq_max_age,
            discard=DiscardPolicy.OLD,
        )


# NATS closes a connection for good (no reconnect) when a protocol line passes its
# max_control_line, 4,096 bytes by default; a subject is most of such a line. Jetway's longest
# subject (a 253-character member name of 4-byte characters, hex-escaped) is about 3,100 bytes:
# this leaves room for the verb, the reply inbox, the sizes and JetStream's API prefixes.
MAX_SUBJECT_BYTES = 3584


@functools.cache
def streams_from_env() -> StreamSettings:
    """The process's stream settings, read once (runtime/settings.py; runtime/entry.py stops a bad start)."""
    return StreamSettings.of(settings.process().streams)


class SubjectTooLong(BadSubjectError):
    """A subject NATS would answer by closing the connection; refused before anything is sent."""

    def __init__(self, subject: str) -> None:
        super().__init__()
        self.size = len(subject.encode())
        self.head = subject[:60]

    def __str__(self) -> str:
        return f"NATS subject of {self.size} bytes ({self.head}...) is longer than the {MAX_SUBJECT_BYTES}-byte bound"


def check_subject(subject: str) -> None:
    if len(subject) > MAX_SUBJECT_BYTES // 4 and len(subject.encode()) > MAX_SUBJECT_BYTES:
        raise SubjectTooLong(subject)


Tap = Callable[[bytes, bytes, bytes, "bytes | None"], None]  # (subject, reply, payload, raw headers) as read off the socket


class BoundedClient(Client):
    """nats-py's client that refuses over-long subjects with SubjectTooLong instead of sending them.

    Every way out goes through `publish` (requests and JetStream too) or `subscribe`.

    A subscription may also be tapped (`tap`): its deliveries are handed to a plain function as the parser reads
    them, as bytes, instead of each becoming a `Msg` on a queue for a task to pass to a callback. nats-py's way costs
    more than decoding an event; runtime/reader.py reads the event stream this way, in batches."""

    def __init__(self) -> None:
        super().__init__()
        self._taps: dict[int, Tap] = {}

    def tap(self, sub: Subscription, handler: Tap) -> None:
        """Hand `sub`'s deliveries to `handler` from now on (it must not raise: it runs inside the read loop)."""
        self._taps[sub._id] = handler

    def untap(self, sub: Subscription) -> None:
        self._taps.pop(sub._id, None)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        handler = self._taps.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        handler(subject, reply, data, headers)

    def publish_now(self, subject: str, payload: bytes) -> bool:
        """Publish `payload` and write it, after whatever publishes buffered before it, to the socket in this loop
        turn: nats-py's `publish` leaves both to its flusher task, a turn later at best. For a message that must
        leave before bytes this turn writes elsewhere: a router replica's counts of its requests in flight, ahead of
        the client's last bytes (services/router/learn.py). False, nothing sent, while not connected."""
        check_subject(subject)
        if not self.is_connected or self._transport is None:
            return False
        self._pending.append(pub_cmd(subject, "", payload))
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += len(payload)
        self._transport.writelines(self._pending)  # in order: what was buffered first goes first
        self._pending = []
        self._pending_data_size = 0
        return True

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "", headers: dict[str, str] | None = None) -> None:
        check_subject(subject)
        check_subject(reply)
        await super().publish(subject, payload, reply, headers)

    async def subscribe(self, subject: str, *args: Any, **kwargs: Any) -> Subscription:
        check_subject(subject)
        return await super().subscribe(subject, *args, **kwargs)


@dataclass(frozen=True)
class Credentials:
    """A service's own NATS user (deploy/ gives each one; contracts/natsauth.py states its rights)."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def of(cls, nats: settings.Nats) -> Credentials | None:
        """JETWAY_NATS_USER and JETWAY_NATS_PASSWORD, or None when neither is set (an open server)."""
        return cls(nats.user, nats.password) if nats.user else None


def _refused(exc: Exception) -> bool:
    return isinstance(exc, nats.errors.AuthorizationError) or "authorization violation" in str(exc).lower()


async def connect(
    url: str,
    *,
    name: str,
    connect_timeout: float = 10.0,
    on_closed: Callable[[], None] | None = None,
    credentials: Credentials | None = None,
) -> Client:
    """A connection that reconnects forever; the first connect retries for `connect_timeout`.

    NATS still closes it for good on some protocol errors; `on_closed` hears of it (and of our
    own close), so the process can stop or report itself unhealthy rather than run on without a bus.
    With `credentials` it connects as that user, its replies under the user's own inbox prefix; a
    first connect whose credentials NATS refuses fails at once (ConnectionError, never the password).
    """
    as_user = f" as {credentials.user!r}" if credentials else ""
    refused = asyncio.Event()

    async def disconnected() -> None:
        log.info("disconnected from NATS", extra={"client": name})

    async def reconnected() -> None:
        refused.clear()
        log.info("reconnected to NATS", extra={"client": name})

    async def error(exc: Exception) -> None:
        if _refused(exc):
            if not refused.is_set():  # once until connected again: a reconnect loop would repeat it every 0.25 s
                log.warning("NATS refused the connection's credentials%s", as_user, extra={"client": name})
            refused.set()
        elif "permissions violation" in str(exc).lower():  # a right missing from contracts/natsauth.py, or a bug
            log.warning("NATS refused: %s", exc, extra={"client": name})
        else:
            log.debug("NATS client error: %s", exc, extra={"client": name})

    async def closed() -> None:
        log.info("NATS connection closed", extra={"client": name, "error": str(client.last_error or "")})
        if on_closed is not None:
            on_closed()

    options: dict[str, Any] = {}
    if credentials is not None:
        options = {"user": credentials.user, "password": credentials.password, "inbox_prefix": inbox_prefix(credentials.user)}
    # nats-py retries the first connection for as long as reconnects are allowed (forever
    # here), so the first connection gets its own deadline.
    client = BoundedClient()
    # "nats://a:4222,nats://b:4222": the servers of a cluster, tried in turn (NATS' usual form)
    servers = [part.strip() for part in url.split(",") if part.strip()]
    connecting = asyncio.ensure_future(
        client.connect(
            servers,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,  # type: ignore[arg-type]  # seconds, a float (nats-py's hint says int)
            allow_reconnect=True,
            connect_timeout=2,
            ping_interval=5,
            max_outstanding_pings=3,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
            closed_cb=closed,
            **options,
        )
    )
    refusal = asyncio.ensure_future(refused.wait())
    try:
        await asyncio.wait([connecting, refusal], timeout=connect_timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        refusal.cancel()
    if connecting.done():
        try:
            connecting.result()
            return client
        except (TimeoutError, OSError, nats.errors.NoServersError) as exc:
            raise ConnectionError(f"cannot reach NATS at {redacted(url)}{as_user}: {type(exc).__name__}") from exc
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    with contextlib.suppress(Exception):
        await client.close()
    if refused.is_set():
        raise ConnectionError(f"NATS at {redacted(url)} refused the credentials{as_user or ' (none given)'}: authorization violation")
    raise ConnectionError(f"cannot reach NATS at {redacted(url)}{as_user}: TimeoutError after {connect_timeout:.0f}s")


def redacted(url: str) -> str:
    """`url` without its credentials, for messages and logs."""
    if "," in url:
        return ",".join(redacted(part) for part in url.split(","))
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}" if sep else url.rsplit("@", 1)[-1]


async def ensure_streams(
    js: JetStreamContext, settings: StreamSettings | None = None, *, timeout: float = 30.0, update: bool = True
) -> None:
    """Create or update the event and dead-letter streams; a cluster still electing its leaders is waited for.

    `update=False` only creates what is missing: a reader (the CLI) never changes the services' retention."""
    settings = settings or streams_from_env()
    deadline = asyncio.get_running_loop().time() + timeout
    delay = 0.1
    while True:
        try:
            for config in (settings.events(), settings.dead_letters()):
                await ensure_stream(js, config, auto_replicas=settings.replicas == 0, update=update, deadline=deadline)
            return
        except (TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError, BadRequestError) as exc:
            transient = not isinstance(exc, BadRequestError) or exc.err_code == STREAMS_UNAVAILABLE
            if not transient or asyncio.get_running_loop().time() + delay > deadline:
                raise
            log.info("JetStream not ready yet (%s); retrying", type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


T = TypeVar("T")


async def with_copies(make: Callable[[int], Awaitable[T]], what: str, *, deadline: float) -> T:
    """`make(3)`: three copies of `what`; `make(1)` where the server cannot place them.

    A single server says so at once. A cluster whose peers have not all joined yet says "insufficient
    resources" just as a cluster of two nodes does, so that answer is retried until `deadline` (a
    fresh three-node cluster, all pods starting together) before `what` settles for one copy."""
    loop = asyncio.get_running_loop()
    delay = 0.2
    while True:
        try:
            return await make(REPLICATED)
        except APIError as exc:
            if exc.err_code not in CANNOT_REPLICATE:
                raise
            if exc.err_code == NOT_CLUSTERED:
                log.info("%s: a single server keeps one copy", what)
            elif loop.time() + delay < deadline:
                log.info("%s: the cluster cannot place %d copies yet (%s); waiting for its peers", what, REPLICATED, exc.description)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            else:
                log.warning("%s: the cluster cannot place %d copies (%s), so it keeps one", what, REPLICATED, exc.description)
            return await make(1)


def one_copy_on_a_cluster(info: StreamInfo) -> bool:
    """A stream (or bucket) made with one copy while its cluster was still forming, or before it grew: it asks
    for three again, which it keeps if the cluster can place them now."""
    return info.config.num_replicas == 1 and info.cluster is not None and bool(info.cluster.name)


# NATS up, but the call not answered (yet): no reply in time, nobody listening, JetStream without a leader (503)
UNANSWERED = (TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError)
START_PATIENCE = 120.0  # seconds a start-up call is tried again while NATS does not answer it


async def patiently(call: Callable[[], Awaitable[T]], what: str, stopping: asyncio.Event, *, patience: float = START_PATIENCE) -> T:
    """`call()`, made again after a backoff (0.5 s doubling to 10 s) while NATS leaves it unanswered: a cluster still
    electing its leaders, or a node too loaded to answer in time. On the first real node every service's start met
    this, and exiting on it only restarted the process into the same wait. Past `patience` the error stands (NATS is
    gone for good: the process exits and its supervisor restarts it); a set `stopping` ends the wait at once."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + patience, 0.5
    while True:
        try:
            return await call()
        except UNANSWERED as exc:
            if stopping.is_set() or loop.time() + delay > deadline:
                raise
            log.warning("%s: NATS did not answer (%s); trying again in %.1f s", what, type(exc).__name__, delay)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can lose a cancellation that meets the wake-up
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stopping.wait()
            delay = min(delay * 2, 10.0)


async def key_value(js: JetStreamContext, config: KeyValueConfig, *, deadline: float) -> KeyValue:
    """The bucket `config` names: an existing one as it is (its stream raised to three copies where it was made with
    one on a cluster: `more_copies`), else made with `config` and three copies where the cluster can place them
    (`with_copies`, until `deadline`); one another replica made meanwhile is taken as it is."""
    try:
        found = await js.key_value(config.bucket)
    except (NotFoundError, BucketNotFoundError):
        pass
    else:
        await more_copies(js, f"KV_{config.bucket}", f"bucket {config.bucket}")
        return found

    async def create(replicas: int) -> KeyValue:
        config.replicas = replicas
        return await js.create_key_value(config)

    try:
        return await with_copies(create, f"bucket {config.bucket}", deadline=deadline)
    except APIError as exc:
        if exc.err_code == 10058:  # made meanwhile by another replica
            return await js.key_value(config.bucket)
        raise


async def more_copies(js: JetStreamContext, stream: str, what: str) -> None:
    """A bucket's stream made with one copy on a cluster gets three once the cluster can place them, as the
    event streams do (`ensure_stream`); where it still cannot, it keeps one."""
    info = await js.stream_info(stream)
    if not one_copy_on_a_cluster(info):
        return
    info.config.num_replicas = REPLICATED
    try:
        await js.update_stream(info.config)
    except APIError as exc:
        if exc.err_code not in CANNOT_REPLICATE:
            raise
        return
    await until_led(js, stream)
    log.info("%s: raised to three copies", what)


async def until_led(js: JetStreamContext, stream: str, timeout: float = LEADER_WAIT) -> None:
    """Wait (bounded) for a stream whose copies just changed to have a leader again: until it has one, a write to it
    goes unanswered (a 5 s timeout for the first put after the change, seen on a cluster)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        info = await js.stream_info(stream)
        if info.cluster is None or info.cluster.leader:
            return
        await asyncio.sleep(0.05)
    log.warning("stream %s: no leader %.0f s after its copies changed; writes wait for one", stream, timeout)


async def ensure_stream(js: JetStreamContext, config: StreamConfig, *, auto_replicas: bool, deadline: float, update: bool = True) -> None:
    """One stream, made when missing (with `auto_replicas`: three copies where the cluster can place them, waiting
    until `deadline` for a forming one); an existing one is brought to `config` with `update`, else left as it is."""
    try:
        info = await js.stream_info(str(config.name))
    except NotFoundError:

        async def create(copies: int) -> None:
            config.num_replicas = copies
            await js.add_stream(config)

        try:
            await (with_copies(create, f"stream {config.name}", deadline=deadline) if auto_replicas else create(config.num_replicas or 1))
        except APIError as exc:
            if exc.err_code != 10058:  # stream name already in use: another service created it first
                raise
        return
    kept = info.config.num_replicas
    if auto_replicas:
        config.num_replicas = kept  # an operator (or the first start) chose it; keep it
        if one_copy_on_a_cluster(info):
            config.num_replicas = REPLICATED
    if update and _differs(info.config, config):
        try:
            await js.update_stream(config)
        except APIError as exc:
            if config.num_replicas == kept or exc.err_code not in CANNOT_REPLICATE:
                raise
            config.num_replicas = kept  # still too small a cluster
            if not _differs(info.config, config):
                return
            await js.update_stream(config)
        if config.num_replicas != kept:
            await until_led(js, str(config.name))
        log.info("stream %s: settings updated (retention, limits or copies changed)", config.name)


# What Jetway sets on each stream (StreamSettings.events and .dead_letters), and so compares: the server fills in the
# rest with its own defaults (max_bytes -1, a 120 s duplicate window, no direct get), which are no change. Comparing
# those too updated the dead-letter stream at every shard's start (119 times in one run).
_SET = ("subjects", "num_replicas", "max_age")
SET_BY_JETWAY = {
    EVENTS_STREAM: (*_SET, "max_bytes", "max_msgs_per_subject", "duplicate_window", "allow_direct", "deny_delete", "deny_purge"),
    DLQ_STREAM: _SET,
}


def _differs(current: StreamConfig, wanted: StreamConfig) -> bool:
    """Whether the stream lacks a setting Jetway asks for."""
    return any(getattr(current, f) != getattr(wanted, f) for f in SET_BY_JETWAY.get(str(wanted.name), _SET))
