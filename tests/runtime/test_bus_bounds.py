"""The bus refuses what NATS would answer by closing the connection, with a clear error (issue 11, D1
and D5). Against a real nats-server: the connection must stay up and keep working afterwards."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts.events import ResourceApplied
from contracts.subjects import Key
from runtime.bus import MAX_SUBJECT_BYTES, BoundedClient, SubjectTooLong
from runtime.eventstore import EventStore, EventTooLarge
from testbed.waiting import eventually

MEMBER = Key("InferencePoolMember", "", "gpu-a")


async def works(nc: Client) -> None:
    """A round trip over the same connection: it is still up and still served."""

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    sub = await nc.subscribe("bounds.echo", cb=echo)
    try:
        assert (await nc.request("bounds.echo", b"ping", timeout=5)).data == b"ping"
    finally:
        await sub.unsubscribe()
    assert nc.is_connected


async def test_a_subject_past_the_bound_is_refused_and_the_connection_survives(client: Client) -> None:
    long = "jetway.evt.3.modeldeployment." + "n" * 5000 + ".qwen.spec"
    with pytest.raises(SubjectTooLong) as refused:
        await client.publish(long, b"x")
    assert str(MAX_SUBJECT_BYTES) in str(refused.value)
    with pytest.raises(SubjectTooLong):
        await client.request(long, b"x", timeout=1)
    with pytest.raises(SubjectTooLong):
        await client.subscribe(long)
    with pytest.raises(SubjectTooLong):
        await client.jetstream().publish(long, b"x")
    await works(client)


async def test_a_subject_at_the_bound_is_carried(client: Client) -> None:
    subject = "bounds." + "s" * (MAX_SUBJECT_BYTES - len("bounds."))

    async def pong(msg: Msg) -> None:
        await msg.respond(b"pong")

    sub = await client.subscribe(subject, cb=pong)
    try:
        assert (await client.request(subject, b"ping", timeout=5)).data == b"pong"
    finally:
        await sub.unsubscribe()
    await works(client)


async def test_an_event_over_the_servers_payload_limit_is_refused_before_it_is_sent(client: Client) -> None:
    store = EventStore(client, producer="watcher")
    big = ResourceApplied(kind=MEMBER.kind, namespace="", name=MEMBER.name, generation=1, spec={"x": "y" * client.max_payload})
    with pytest.raises(EventTooLarge) as refused:
        await store.append(MEMBER.subject(), big, expected_seq=0)
    assert refused.value.limit == client.max_payload and refused.value.size > client.max_payload
    assert await store.last_seq(MEMBER.subject()) == 0
    small = ResourceApplied(kind=MEMBER.kind, namespace="", name=MEMBER.name, generation=1, spec={"x": "y"})
    assert (await store.append(MEMBER.subject(), small, expected_seq=0)).seq == 1
    await works(client)


async def test_a_message_published_now_leaves_in_this_loop_turn_after_what_was_buffered(client: Client) -> None:
    """`publish_now` writes to the socket before it returns (a router's counts go ahead of a client's last bytes),
    after the publishes nats-py had buffered for its flusher: the subscriber gets them in the order published."""
    assert isinstance(client, BoundedClient)
    got: list[bytes] = []

    async def append(msg: Msg) -> None:
        got.append(msg.data)

    sub = await client.subscribe("now.>", cb=append)
    await client.flush()
    await client.publish("now.queued", b"first")  # buffered for the flusher's next turn
    assert client.pending_data_size > 0
    assert client.publish_now("now.at-once", b"second")
    assert client.pending_data_size == 0, "written, with what was buffered before it"
    await eventually(lambda: len(got) == 2, timeout=5, message="both delivered")
    assert got == [b"first", b"second"]
    await sub.unsubscribe()
    await works(client)
