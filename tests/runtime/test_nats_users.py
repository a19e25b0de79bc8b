"""Each service's own NATS user, enforced by a real server running contracts/natsauth.py's
`authorization` block: a service writes its own facets and nothing else, holds only its own leases,
and a wrong or missing password is refused at once without being echoed.

That the rights are enough for the whole pipeline is shown on a real API server by
tests/kube/test_least_privilege.py, which runs every service as its own user."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from contracts.events import StatusReported
from contracts.natsauth import PASSWORD_ENV, SERVICES, USER_ENV, new_password, permissions, render_authorization, service_user
from contracts.subjects import ALL_PARTITIONS, Key
from runtime import settings
from runtime.bus import EVENTS_STREAM, Credentials, connect, ensure_streams
from runtime.eventstore import EventStore, StoreUnavailable
from runtime.leases import BUCKET, Leases, LeaseSettings
from runtime.leases import bucket as lease_bucket
from runtime.natsserver import NatsServer

QWEN = Key("ModelDeployment", "team-a", "qwen")


@pytest.fixture
def passwords() -> dict[str, str]:
    return {s.user: new_password() for s in SERVICES}


@pytest.fixture
def secured(tmp_path: Path, passwords: dict[str, str]) -> Iterator[NatsServer]:
    """NATS as deploy/ runs it: every service a user of its own, passwords from the server's environment."""
    environ = {service_user(user).password_env: password for user, password in passwords.items()}
    server = NatsServer(store_dir=tmp_path / "nats", authorization=render_authorization(), environ=environ).start()
    try:
        yield server
    finally:
        server.stop()


OpenAs = Callable[[str], Awaitable[Client]]


@pytest.fixture
async def open_as(secured: NatsServer, passwords: dict[str, str]) -> AsyncIterator[OpenAs]:
    """Connect as one service's user; every connection is closed after the test."""
    opened: list[Client] = []

    async def open_(user: str) -> Client:
        nc = await connect(secured.url, name=user, credentials=Credentials(user, passwords[user]), connect_timeout=5)
        opened.append(nc)
        return nc

    yield open_
    for nc in opened:
        await nc.close()


async def test_a_service_writes_its_own_facet_and_is_refused_another_services(open_as: OpenAs, caplog: pytest.LogCaptureFixture) -> None:
    selector = await open_as("selector")
    await ensure_streams(selector.jetstream())  # every service may make the streams at start-up
    store = EventStore(selector, producer="selector")  # the usual timeouts for what is allowed
    refused = EventStore(selector, producer="selector", append_timeout=1.0, request_timeout=1.0)  # no answer comes to a refusal

    mine = await store.append(QWEN.subject("selector"), StatusReported(generation=1), expected_seq=0)
    assert mine.seq > 0

    caplog.set_level(logging.WARNING, logger="jetway.bus")
    forged = QWEN.subject("workload")  # the workload service's decisions: one writer, and it is not the selector
    with pytest.raises(StoreUnavailable):
        await refused.append(forged, StatusReported(generation=1), expected_seq=0)
    assert any("permissions violation" in r.getMessage().lower() and forged in r.getMessage() for r in caplog.records)
    assert await store.last_seq(forged) == 0  # nothing was stored
    assert await store.last_seq(QWEN.subject("selector")) == mine.seq

    # nor may it state what a user applied (the watcher's spec facet)
    with pytest.raises(StoreUnavailable):
        await refused.append(QWEN.subject(), StatusReported(generation=1))
    assert await store.last_seq(QWEN.subject()) == 0


async def test_a_service_holds_its_own_leases_and_cannot_take_another_services(open_as: OpenAs) -> None:
    selector = await open_as("selector")
    await ensure_streams(selector.jetstream())
    mine = Leases(selector.jetstream(timeout=10.0), "selector", ALL_PARTITIONS, replica="selector-0", settings=LeaseSettings(5.0))
    mine._kv = await lease_bucket(mine.js, 5.0)  # the bucket, made by the first service to start
    await mine.tick()
    assert mine.holds() == set(ALL_PARTITIONS)
    # the workload's leases: holding one would stop the workload deciding about that partition
    quick = await selector.jetstream(timeout=1.0).key_value(BUCKET)  # no answer comes to a refused request
    with pytest.raises(Exception) as refused:
        await quick.create("workload.lease.3", b"selector-0")
    assert type(refused.value).__name__ in {"TimeoutError", "NoRespondersError"}
    workload = await open_as("workload")
    theirs = Leases(workload.jetstream(timeout=10.0), "workload", ALL_PARTITIONS, replica="workload-0", settings=LeaseSettings(5.0))
    theirs._kv = await lease_bucket(theirs.js, 5.0)
    await theirs.tick()
    assert theirs.holds() == set(ALL_PARTITIONS)  # none was taken from it
    await mine.release_all()
    await theirs.release_all()


async def test_the_console_reads_the_log_and_cannot_change_the_streams_settings(open_as: OpenAs) -> None:
    """The most exposed service (users reach it) may not change retention: a compromised console cannot wipe the log."""
    selector = await open_as("selector")
    await ensure_streams(selector.jetstream())
    store = EventStore(selector, producer="selector")
    await store.append(QWEN.subject("selector"), StatusReported(generation=1), expected_seq=0)
    console = await open_as("console")
    js = console.jetstream(timeout=10.0)
    await ensure_streams(js, update=False)  # what the console's runner does: reads, changes nothing
    assert [item.seq for item in await EventStore(console, producer="console").read(QWEN.subject("selector"))]
    info = await js.stream_info(EVENTS_STREAM)
    info.config.max_msgs_per_subject = 1
    with pytest.raises(Exception) as refused:  # no answer comes to a refused request: a timeout
        await console.jetstream(timeout=1.0).update_stream(info.config)
    assert type(refused.value).__name__ in {"TimeoutError", "NoRespondersError"}
    assert (await selector.jetstream().stream_info(EVENTS_STREAM)).config.max_msgs_per_subject != 1


async def test_a_wrong_password_is_refused_at_once_and_never_echoed(secured: NatsServer, passwords: dict[str, str]) -> None:
    wrong = new_password()
    with pytest.raises(ConnectionError) as refused:
        await connect(secured.url, name="selector", credentials=Credentials("selector", wrong), connect_timeout=8)
    assert "refused the credentials as 'selector'" in str(refused.value)
    assert wrong not in str(refused.value) and passwords["selector"] not in str(refused.value)

    with pytest.raises(ConnectionError, match="refused the credentials"):  # an open client is not let in either
        await connect(secured.url, name="anyone", connect_timeout=8)


def test_credentials_come_from_the_environment_both_or_neither() -> None:
    assert Credentials.of(settings.load({}).nats) is None
    found = Credentials.of(settings.load({USER_ENV: "selector", PASSWORD_ENV: "s3cret"}).nats)
    assert found == Credentials("selector", "s3cret")
    assert "s3cret" not in repr(found)
    with pytest.raises(ValueError, match="go together"):
        settings.load({USER_ENV: "selector"})


def test_every_service_may_write_only_its_own_facets() -> None:
    """Exactly one writer per facet subject (contracts/subjects.py's rule, here as the server will enforce it)."""
    writers: dict[str, list[str]] = {}
    for service in SERVICES:
        for subject in permissions(service)["publish"]:
            if subject.startswith("jetway.evt."):
                writers.setdefault(subject, []).append(service.user)
    assert {s: w for s, w in writers.items() if len(w) > 1} == {}
    assert "jetway.evt.*.modeldeployment.*.*.workload" not in permissions(service_user("selector"))["publish"]


async def test_router_replicas_as_the_router_user_tell_count_and_ask_the_placer(open_as: OpenAs) -> None:
    """The router's rights cover what its replicas say to each other (services/router/learn.py): counts, placements,
    and a new conversation asked of the placer and answered to the asker's inbox."""
    from contracts.poolmember import InferencePoolMemberSpec
    from contracts.routing import ROUTING_PREFIX
    from services.router import policy
    from services.router.learn import Learner
    from services.router.projection import Member, Members
    from testbed.waiting import eventually

    def team() -> Members:
        found = Members()
        spec = InferencePoolMemberSpec.model_validate({"backend": "vllm-openai", "url": "http://10.0.0.1:8000", "models": [{"name": "m"}]})
        for name in ("a", "b"):
            key = Key("InferencePoolMember", "", name)
            found.items[key] = Member(key, 1, spec)
            found.by_model.setdefault("m", set()).add(key)
        return found

    settings_ = policy.Settings()
    replicas = [
        Learner(await open_as("router"), f"{ROUTING_PREFIX}.{name}", team(), policy.Memory.of(settings_), settings_) for name in "pq"
    ]
    for replica in replicas:
        await replica.start(0)
    sharing = [asyncio.create_task(replica.share_load()) for replica in replicas]
    placer, asker = replicas
    try:
        await eventually(lambda: asker.placer() == "p", timeout=10, message="q hears p, the placer")
        prompt = policy.Prompt({"messages": [{"role": "user", "content": "a new conversation " * 20}]}, None)
        placed = await asker.place("m", asker.members.declaring("m"), prompt, settings_)
        assert placed is not None and placed[2] == "p" and placer.placed == 1
        member, _, _ = placed
        assert placer.members.traffic_of(member.key).others == 1, "the placer counts it as q's request in flight"
    finally:
        for replica in replicas:
            await replica.stop()
        await asyncio.wait(sharing, timeout=5)
