"""Bounded history (docs/event-store.md, "Retention"): the latest events of every facet are kept, older ones trimmed."""

from __future__ import annotations

import logging

import pytest
from nats.aio.client import Client

from contracts.events import StatusCondition, StatusReported, StatusSlice, encode, new_envelope
from contracts.subjects import ROUTER, Key
from runtime import settings
from runtime.bus import EVENTS_STREAM, HISTORY_PER_FACET, StreamSettings, ensure_streams
from runtime.eventstore import EventStore
from testbed.waiting import eventually

HISTORY_ENV = "JETWAY_HISTORY_PER_FACET"

MEMBER = Key("InferencePoolMember", "", "gpu-a")


def flip(generation: int, healthy: bool) -> StatusReported:
    phase, status, reason = ("Healthy", "True", "ProbeSucceeded") if healthy else ("Unhealthy", "False", "ProbeFailed")
    return StatusReported(
        generation=generation, status=StatusSlice(phase=phase, conditions=(StatusCondition(type="Healthy", status=status, reason=reason),))
    )


def test_history_per_facet_is_read_from_the_environment() -> None:
    assert StreamSettings.of(settings.load({}).streams) == StreamSettings(history_per_facet=HISTORY_PER_FACET)
    assert StreamSettings.of(settings.load({HISTORY_ENV: "10"}).streams).history_per_facet == 10
    assert StreamSettings.of(settings.load({HISTORY_ENV: "unlimited"}).streams).history_per_facet == -1
    for bad in ("0", "-3", "ten"):
        with pytest.raises(ValueError, match=HISTORY_ENV):
            settings.load({HISTORY_ENV: bad})
    assert StreamSettings().events().max_msgs_per_subject == HISTORY_PER_FACET
    assert StreamSettings().events().max_age == 0  # no age: an age would drop a facet's latest event too


async def test_ensure_streams_applies_new_retention_to_an_existing_stream(client: Client) -> None:
    js = client.jetstream()
    await ensure_streams(js, StreamSettings(history_per_facet=-1))  # as an older Jetway made it: everything kept
    assert (await js.stream_info(EVENTS_STREAM)).config.max_msgs_per_subject == -1
    store = EventStore(client, producer="router")
    seq = 0
    for n in range(10):
        seq = (await store.append(MEMBER.subject(ROUTER), flip(1, n % 2 == 0), expected_seq=seq)).seq or 0
    await ensure_streams(js, StreamSettings(history_per_facet=3))
    info = await js.stream_info(EVENTS_STREAM)
    assert info.config.max_msgs_per_subject == 3
    history = await store.history(MEMBER)
    assert [item.seq for item in history] == [8, 9, 10]  # the existing history is trimmed at once, the latest kept
    await ensure_streams(js, StreamSettings(history_per_facet=3), update=False)
    await ensure_streams(js, StreamSettings(history_per_facet=50), update=False)  # a reader changes nothing
    assert (await js.stream_info(EVENTS_STREAM)).config.max_msgs_per_subject == 3


async def test_only_the_latest_n_events_of_each_facet_remain_and_the_latest_always(client: Client) -> None:
    js = client.jetstream()
    await ensure_streams(js, StreamSettings(history_per_facet=4))
    store = EventStore(client, producer="router")
    members = [Key("InferencePoolMember", "", f"gpu-{i}") for i in range(5)]
    last: dict[Key, int] = {m: 0 for m in members}
    for n in range(1, 11):
        for member in members[: n % 5 + 1]:  # facets with 2 to 10 events each
            last[member] = (await store.append(member.subject(ROUTER), flip(1, n % 2 == 0), expected_seq=last[member])).seq or 0
    for member in members:
        history = await store.history(member)
        assert 1 <= len(history) <= 4
        assert history[-1].seq == last[member]  # the latest is always kept
    # appends keep working on a trimmed facet: the expected sequence is the facet's last, which is kept
    await store.append(members[0].subject(ROUTER), flip(2, True), expected_seq=last[members[0]])


async def test_a_year_of_probe_flips_on_1000_members_stays_bounded(client: Client) -> None:
    """1,000 members, each flipping health 25 times in a year (one flip a fortnight), the stream keeping 10
    events per facet: 10,000 events remain whatever the year's length, under 1,000 x 10 x 512 bytes (an
    event is about 408). 25 flips, not more, because the test server fsyncs every write (about 5,500 a
    second here); the bound does not depend on how many flips there were. With the default (64 per
    facet), 100 flips each left 64,000 events, 26.1 MB (docs/event-store.md)."""
    js = client.jetstream()
    per_facet, members, flips = 10, 1000, 25
    await ensure_streams(js, StreamSettings(history_per_facet=per_facet))
    payloads = [
        encode(new_envelope(Key("InferencePoolMember", "", "m").subject(ROUTER), flip(1, h), producer="router")) for h in (True, False)
    ]
    subjects = [Key("InferencePoolMember", "", f"member-{m:04d}").subject(ROUTER) for m in range(members)]
    for n in range(flips):  # core publishes, no acks awaited: the test measures what is kept, not the append path
        payload = payloads[n % 2]
        for subject in subjects:
            await client.publish(subject, payload)
        await client.flush()

    async def all_stored() -> bool:
        return bool((await js.stream_info(EVENTS_STREAM)).state.last_seq >= members * flips)

    await eventually(all_stored, timeout=120, interval=0.05, message="every flip stored")
    state = (await js.stream_info(EVENTS_STREAM)).state
    assert state.last_seq == members * flips
    assert state.messages == members * per_facet  # 10,000 of 25,000
    assert state.bytes < members * per_facet * 512, state.bytes
    latest = await js.get_last_msg(EVENTS_STREAM, subjects[-1])
    assert latest.seq == members * flips  # every member's latest health is kept


async def test_ensure_streams_changes_nothing_when_the_settings_hold(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    """The server's own defaults for what Jetway leaves unset are no difference: every shard of every service runs
    this at its start, and each needless update is a round of the stream's consensus."""
    js = client.jetstream()
    await ensure_streams(js)
    caplog.set_level(logging.INFO, logger="jetway.bus")
    for _ in range(3):
        await ensure_streams(js)
    assert "settings updated" not in caplog.text
