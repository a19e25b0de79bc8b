"""The event store against a real nats-server: append, conflicts, de-duplication, replay."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from contracts.events import Envelope, ResourceApplied, ResourceDeleted, StatusReported, StatusSlice
from contracts.subjects import Key, decode_token, encode_token, parse_subject
from runtime.bus import EVENTS_STREAM, ensure_streams
from runtime.eventstore import Conflict, EventStore, Undecodable
from runtime.reader import Message, OrderedReader
from testbed.waiting import within

MEMBER = Key("InferencePoolMember", "", "gpu-a")


def applied(key: Key, generation: int = 1, **spec: object) -> ResourceApplied:
    return ResourceApplied(kind=key.kind, namespace=key.namespace, name=key.name, generation=generation, spec=dict(spec))


@pytest.fixture
def store(client: Client) -> EventStore:
    return EventStore(client, producer="watcher")


async def test_append_returns_the_stored_sequence_and_envelope(store: EventStore) -> None:
    first = await store.append(MEMBER.subject(), applied(MEMBER), expected_seq=0)
    second = await store.append(MEMBER.subject(), applied(MEMBER, 2), expected_seq=first.seq)
    assert (first.seq, second.seq) == (1, 2)
    assert second.producer == "watcher" and second.event.generation == 2  # type: ignore[attr-defined]
    assert await store.last_seq(MEMBER.subject()) == 2


async def test_stale_writer_gets_a_conflict_and_stores_nothing(store: EventStore) -> None:
    await store.append(MEMBER.subject(), applied(MEMBER), expected_seq=0)
    await store.append(MEMBER.subject(), applied(MEMBER, 2), expected_seq=1)
    with pytest.raises(Conflict) as conflict:
        await store.append(MEMBER.subject(), applied(MEMBER, 3), expected_seq=1)
    assert conflict.value.actual == 2
    assert [i.event.generation for i in await store.history(MEMBER)] == [1, 2]  # type: ignore[union-attr]


async def test_expected_sequence_guards_each_facet_separately(store: EventStore) -> None:
    await store.append(MEMBER.subject(), applied(MEMBER), expected_seq=0)
    # another facet of the same resource starts at 0: a service's decisions never conflict with applies
    decision = await store.append(MEMBER.subject("router"), StatusReported(generation=1), expected_seq=0)
    assert decision.seq == 2
    await store.append(MEMBER.subject(), applied(MEMBER, 2), expected_seq=1)


async def test_duplicate_message_id_is_stored_once(store: EventStore) -> None:
    one = await store.append(MEMBER.subject(), applied(MEMBER), msg_id="apply-1")
    two = await store.append(MEMBER.subject(), applied(MEMBER), msg_id="apply-1")
    assert one.seq == two.seq == 1
    assert len(await store.read()) == 1


async def test_retry_after_a_lost_ack_is_recognised_not_conflicted(store: EventStore) -> None:
    # The first attempt was stored but its ack was lost: the retry carries the same message id
    # and the now-stale expected sequence. JetStream answers "wrong last sequence"; the store
    # recognises its own message and reports success with the original sequence.
    first = await store.append(MEMBER.subject(), applied(MEMBER), expected_seq=0, msg_id="once")
    retry = await store.append(MEMBER.subject(), applied(MEMBER), expected_seq=0, msg_id="once")
    assert retry.seq == first.seq
    assert len(await store.read()) == 1


async def _fill(store: EventStore, count: int) -> list[Envelope]:
    return [
        await store.append(Key("ModelDeployment", "ns", f"m{i}").subject(), applied(Key("ModelDeployment", "ns", f"m{i}")))
        for i in range(count)
    ]


async def test_replay_from_start_by_sequence_and_until(store: EventStore) -> None:
    stored = await _fill(store, 10)
    assert [i.seq for i in await store.read()] == [e.seq for e in stored]
    assert [i.seq for i in await store.read(since_seq=4)] == list(range(4, 11))
    assert [i.seq for i in await store.read(until_seq=3)] == [1, 2, 3]
    assert [i.seq for i in await store.read(since_seq=5, until_seq=6)] == [5, 6]
    assert await store.read(since_seq=11) == []


async def test_replay_by_time(store: EventStore) -> None:
    early = await _fill(store, 3)
    middle = datetime.now(UTC)
    late = await _fill(store, 2)
    since = [i.seq for i in await store.read(since_time=middle)]
    assert since == [e.seq for e in late]
    assert [i.seq for i in await store.read(until_time=middle)] == [e.seq for e in early]
    assert await store.read(since_time=datetime.now(UTC) + timedelta(hours=1)) == []


async def test_replay_of_an_empty_filter_returns_at_once(store: EventStore) -> None:
    await _fill(store, 2)
    assert await store.read("jetway.evt.*.agentdeployment.>") == []


async def test_history_holds_every_facet_of_one_resource_in_order(store: EventStore) -> None:
    other = Key("InferencePoolMember", "", "gpu-b")
    await store.append(MEMBER.subject(), applied(MEMBER))
    await store.append(other.subject(), applied(other))
    await store.append(MEMBER.subject("router"), StatusReported(generation=1, status=StatusSlice(phase="Healthy")))
    await store.append(MEMBER.subject(), ResourceDeleted(kind=MEMBER.kind, namespace="", name=MEMBER.name))
    history = await store.history(MEMBER)
    assert [(i.facet, i.type) for i in history] == [  # type: ignore[union-attr]
        ("spec", "ResourceApplied.v1"),
        ("router", "StatusReported.v1"),
        ("spec", "ResourceDeleted.v1"),
    ]


async def test_latest_state_of_every_resource_of_a_kind(store: EventStore) -> None:
    a, b = Key("ModelDeployment", "x", "a"), Key("ModelDeployment", "y", "b")
    await store.append(a.subject(), applied(a, 1))
    await store.append(b.subject(), applied(b, 1))
    await store.append(a.subject(), applied(a, 2))
    await store.append(a.subject("selector"), StatusReported(generation=2))
    latest = await store.latest("ModelDeployment")
    assert {k: e.event.generation for k, e in latest.items()} == {a: 2, b: 1}  # type: ignore[attr-defined]


async def test_unreadable_messages_are_reported_in_order_not_raised(client: Client, store: EventStore) -> None:
    await store.append(MEMBER.subject(), applied(MEMBER))
    await client.jetstream().publish(MEMBER.subject(), b"\x00not json", stream=EVENTS_STREAM)
    await client.jetstream().publish(
        MEMBER.subject(), msgspec.json.encode({"id": "x", "event": {"type": "Future.v9"}}), stream=EVENTS_STREAM
    )
    await store.append(MEMBER.subject(), applied(MEMBER, 2))
    items = await store.read()
    assert [type(i).__name__ for i in items] == ["Envelope", "Undecodable", "Undecodable", "Envelope"]
    bad = [i for i in items if isinstance(i, Undecodable)]
    assert "malformed" in bad[0].reason and "not a Jetway event" in bad[1].reason


async def test_streams_are_created_idempotently(client: Client) -> None:
    js = client.jetstream()
    await ensure_streams(js)
    await ensure_streams(js)
    info = await js.stream_info(EVENTS_STREAM)
    assert info.config.subjects == ["jetway.evt.>"] and info.config.storage == "file"
    assert info.config.duplicate_window == 120


async def test_names_with_dots_and_any_characters_stay_one_subject_token(store: EventStore) -> None:
    odd = Key("InferencePoolMember", "", "gpu.a b*>_é")
    stored = await store.append(odd.subject(), applied(odd))
    assert stored.key == odd
    assert len(stored.subject.split(".")) == 7
    assert [i.key for i in await store.history(odd)] == [odd]  # type: ignore[union-attr]


@given(st.text(min_size=1, max_size=60))
def test_subject_tokens_round_trip(name: str) -> None:
    token = encode_token(name)
    assert decode_token(token) == name
    assert all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in token)
    key = Key("ModelDeployment", "ns.with.dots", name)
    parsed = parse_subject(key.subject("selector"))
    assert (parsed.namespace, parsed.name, parsed.facet, parsed.partition) == ("ns.with.dots", name, "selector", key.partition)


async def test_a_delivered_events_sequence_pending_and_time_are_read_as_nats_py_reads_them(store: EventStore) -> None:
    """The reader reads the reply subject itself (runtime/reader.py): the same sequence, pending count and time as
    nats-py's Msg.metadata, and the same headers."""
    for n in range(3):
        key = Key("InferencePoolMember", "", f"m{n}")
        await store.append(key.subject(), applied(key))
    sub = await store.js.subscribe("jetway.evt.>", stream=EVENTS_STREAM, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    reader = OrderedReader(store.nc, EVENTS_STREAM, ["jetway.evt.>"])
    try:
        assert await reader.start() == 3
        ours: list[Message] = []
        while len(ours) < 3:
            ours += await reader.next_batch()
        for message in ours:
            msg = await sub.next_msg(timeout=5)
            meta = msg.metadata
            assert (message.subject, message.seq, message.pending) == (msg.subject, meta.sequence.stream, meta.num_pending)
            assert message.stored == meta.timestamp
            assert message.header_map() == msg.headers
    finally:
        await sub.unsubscribe()
        await reader.close()


async def _publish_many(store: EventStore, count: int, size: int = 0) -> None:
    pending = []
    for n in range(count):
        key = Key("InferencePoolMember", "", f"r{n % 50}")
        pending.append(await store.js.publish_async(key.subject(), _encoded(key, n, size)))
    for ack in pending:
        await ack


def _encoded(key: Key, n: int, size: int) -> bytes:
    from contracts.events import encode, new_envelope

    return encode(new_envelope(key.subject(), applied(key, n + 1, pad="x" * size), producer="test"))


async def test_the_reader_gives_a_slow_caller_a_backlog_past_the_flow_control_window_in_order_and_once(store: EventStore) -> None:
    """Flow control answered as the caller takes: 8 MB read ten events at a time, every event once, in order."""
    await _publish_many(store, 2000, size=4000)  # 8 MB: more than a flow-control window
    reader = OrderedReader(store.nc, EVENTS_STREAM, ["jetway.evt.>"])
    seqs: list[int] = []
    try:
        assert await reader.start() == 2000
        while len(seqs) < 2000:
            seqs += [m.seq for m in await reader.next_batch(10)]
            for _ in range(5):  # a slow caller: the connection reads on meanwhile
                await asyncio.sleep(0)
    finally:
        await reader.close()
    assert seqs == list(range(1, 2001))


async def test_the_reader_makes_a_lost_consumer_again_from_the_last_event_kept(store: EventStore) -> None:
    await _publish_many(store, 300)
    reader = OrderedReader(store.nc, EVENTS_STREAM, ["jetway.evt.>"], heartbeat=0.5)
    seqs: list[int] = []
    try:
        await reader.start()
        while len(seqs) < 10:
            seqs += [m.seq for m in await reader.next_batch(10)]
        await store.js.delete_consumer(EVENTS_STREAM, reader.consumer)  # as a NATS restart would lose it
        await _publish_many(store, 100)
        while len(seqs) < 400:
            seqs += [m.seq for m in await reader.next_batch()]
    finally:
        await reader.close()
    assert reader.remade >= 1
    assert seqs == list(range(1, 401)), "in order, nothing lost, nothing twice"


async def test_a_scan_ends_when_the_events_it_was_to_read_are_purged_while_it_reads(store: EventStore) -> None:
    """The watcher purges a deleted resource's history while `jetway events` (or a test) may be reading it: what the
    reader's consumer counted when it was made is gone, and the scan ends with what arrived (CI hung here 120 s)."""
    await _publish_many(store, 2000, size=4000)  # 8 MB: past a flow-control window, so most is still in the server
    purge: list[asyncio.Task[object]] = []
    seqs: list[int] = []

    def take(item: object) -> None:
        seqs.append(item.seq)  # type: ignore[attr-defined]
        if not purge:
            purge.append(asyncio.ensure_future(store.js.purge_stream(EVENTS_STREAM, subject="jetway.evt.>")))

    await within(store.scan("jetway.evt.>", take), timeout=30)
    await purge[0]
    assert 0 < len(seqs) < 2000, "the scan read some, then ended at what was left"
    assert seqs == list(range(1, len(seqs) + 1)), "in order, nothing twice"


async def test_a_scan_whose_consumer_is_lost_while_it_reads_goes_on_from_the_last_event_kept(store: EventStore) -> None:
    """As a NATS restart loses the reader's in-memory consumer: asking whether it has anything left must not end the scan
    with an error, nor end it early; the consumer is made again and every event arrives once, in order."""
    await _publish_many(store, 2000, size=4000)  # past a flow-control window: most is still in the server when it goes
    lost: list[asyncio.Task[None]] = []
    seqs: list[int] = []

    async def lose_every_consumer() -> None:
        for info in await store.js.consumers_info(EVENTS_STREAM):
            await store.js.delete_consumer(EVENTS_STREAM, info.name)

    def take(item: object) -> None:
        seqs.append(item.seq)  # type: ignore[attr-defined]
        if not lost:
            lost.append(asyncio.ensure_future(lose_every_consumer()))

    await within(store.scan("jetway.evt.>", take), timeout=60)
    await lost[0]
    assert seqs == list(range(1, 2001)), "in order, nothing lost, nothing twice"
