"""Prometheus metrics (runtime/metrics.py) as a scraper sees them: a real runner on a real NATS server, and
`GET /metrics` from the health server over HTTP. The registry is the process's: each test uses service names
of its own and compares figures before and after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import aiohttp
import pytest
from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from contracts.events import Envelope, ResourceApplied, type_tag
from contracts.subjects import Key, kind_filter
from runtime.bus import EVENTS_STREAM
from runtime.entry import serve_health
from runtime.eventstore import EventStore
from runtime.leases import Leases, LeaseSettings
from runtime.service import Effects, Permanent, Runner, RunnerSettings, Service
from testbed.waiting import eventually, within

FAST = RunnerSettings(backoff=(0.05, 0.1, 0.2))
APPLIED = type_tag(ResourceApplied)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Members:
    generation: dict[str, int] = field(default_factory=dict)


class Gated(Service):
    """Folds InferencePoolMembers and decides nothing (so every event it handles is one published here).
    Reconciling a `fail-*` member raises, a `never-*` member raises Permanent; one named in `gates` waits until
    its gate opens."""

    consumes = (kind_filter("InferencePoolMember"),)

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = Members()
        self.gates: dict[str, asyncio.Event] = {}
        self.waiting: set[str] = set()

    def fold(self, envelope: Envelope) -> None:
        if isinstance(envelope.event, ResourceApplied):
            self.state.generation[envelope.key.name] = envelope.event.generation

    def keys(self) -> Iterable[Key]:
        return [member(name) for name in self.state.generation]

    async def reconcile(self, key: Key, effects: Effects) -> None:
        if key.name.startswith("fail-"):
            raise RuntimeError(f"cannot reconcile {key.name}")
        if key.name.startswith("never-"):
            raise Permanent(f"{key.name} cannot be reconciled")
        gate = self.gates.get(key.name)
        if gate is not None:
            self.waiting.add(key.name)
            await gate.wait()
            self.waiting.discard(key.name)


def member(name: str) -> Key:
    return Key("InferencePoolMember", "", name)


async def publish(store: EventStore, *names: str) -> None:
    for name in names:
        key = member(name)
        await store.append(key.subject(), ResourceApplied(kind=key.kind, namespace="", name=name, generation=1, spec={"backend": "echo"}))


@dataclass
class Scraper:
    url: str
    http: aiohttp.ClientSession

    async def __call__(self) -> Samples:
        async with self.http.get(self.url) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
        return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@dataclass
class Started:
    client: Client
    runners: list[tuple[Runner, asyncio.Task[None]]] = field(default_factory=list)

    def start(self, service: Service, settings: RunnerSettings = FAST) -> Runner:
        runner = Runner(service, self.client, settings)
        self.runners.append((runner, asyncio.create_task(runner.run())))
        return runner


@pytest.fixture
async def started(client: Client) -> AsyncIterator[Started]:
    running = Started(client)
    yield running
    for runner, _ in running.runners:
        runner.stop()
    await asyncio.wait_for(asyncio.gather(*(t for _, t in running.runners), return_exceptions=True), 30)


@pytest.fixture
async def scrape(client: Client, started: Started) -> AsyncIterator[Scraper]:
    """`GET /metrics` on a health server of the test's own (a free port)."""
    health = await serve_health(client, [], [], "127.0.0.1", 0)
    host, port = health.addresses[0][:2]
    async with aiohttp.ClientSession() as http:
        yield Scraper(f"http://{host}:{port}/metrics", http)
    await health.cleanup()


async def test_events_handled_count_each_published_event_once(client: Client, started: Started, scrape: Scraper) -> None:
    name = "metered-handled"
    runner = started.start(Gated(name))
    await within(runner.ready.wait(), 20)
    before = await scrape()
    await publish(EventStore(client, producer="watcher"), *(f"m{i}" for i in range(5)))
    await client.jetstream().publish(member("poison").subject(), b"{not an event", stream=EVENTS_STREAM)

    def delta(samples: Samples, metric: str, **labels: str) -> float:
        return value(samples, metric, service=name, **labels) - value(before, metric, service=name, **labels)

    handled = "jetway_events_handled_total"

    def settled(s: Samples) -> bool:  # what is asserted below, each counted at a point of its own
        return (
            delta(s, handled, type=APPLIED, outcome="ok") >= 5
            and delta(s, handled, type="unknown", outcome="invalid") >= 1
            and delta(s, "jetway_events_dead_lettered_total") >= 1
            and delta(s, "jetway_handler_duration_seconds_count") >= 1
        )

    after = await eventually(lambda: _when(scrape(), settled), message="5 events handled and the poison one dead-lettered")
    assert delta(after, handled, type=APPLIED, outcome="ok") == 5
    assert delta(after, handled, type="unknown", outcome="invalid") == 1  # undecodable: dead-lettered at once
    assert delta(after, "jetway_events_dead_lettered_total") == 1
    assert delta(after, "jetway_reconcile_duration_seconds_count") == 5
    assert delta(after, "jetway_handler_duration_seconds_count") >= 1


async def test_a_failing_reconcile_is_counted_and_retried_never_dead_lettered(client: Client, started: Started, scrape: Scraper) -> None:
    name = "metered-failing"
    runner = started.start(Gated(name))
    await within(runner.ready.wait(), 20)
    before = await scrape()
    await publish(EventStore(client, producer="watcher"), "fail-1")

    def delta(samples: Samples, metric: str, **labels: str) -> float:
        return value(samples, metric, service=name, **labels) - value(before, metric, service=name, **labels)

    def settled(s: Samples) -> bool:
        return (
            delta(s, "jetway_events_retried_total") >= 3 and delta(s, "jetway_events_handled_total", type=APPLIED, outcome="retrying") >= 1
        )

    after = await eventually(lambda: _when(scrape(), settled), timeout=15, message="retried three times")
    assert delta(after, "jetway_events_dead_lettered_total") == 0  # dead letters are for what cannot be read
    assert delta(after, "jetway_events_handled_total", type=APPLIED, outcome="retrying") == 1  # the event, once
    assert delta(after, "jetway_events_handled_total", type=APPLIED, outcome="ok") == 0
    assert delta(after, "jetway_reconcile_duration_seconds_count") >= 4  # every attempt timed


async def test_a_permanent_failure_is_counted_once_and_not_retried(client: Client, started: Started, scrape: Scraper) -> None:
    name = "metered-permanent"
    runner = started.start(Gated(name))
    await within(runner.ready.wait(), 20)
    before = await scrape()
    store = EventStore(client, producer="watcher")
    await publish(store, "never-1")

    def delta(samples: Samples, metric: str, **labels: str) -> float:
        return value(samples, metric, service=name, **labels) - value(before, metric, service=name, **labels)

    await eventually(lambda: runner.failed.get(member("never-1")), message="the permanent failure recorded")
    await publish(store, "after")  # handled after it: a retry of never-1 would have been scheduled by now
    await eventually(lambda: runner.seen.get(member("after").subject()), message="the next event handled")
    after = await eventually(
        lambda: _when(scrape(), lambda s: delta(s, "jetway_events_handled_total", type=APPLIED, outcome="ok") >= 1),
        message="the next event counted",
    )
    assert delta(after, "jetway_reconcile_permanent_failures_total") == 1
    assert delta(after, "jetway_events_handled_total", type=APPLIED, outcome="failed") == 1
    assert delta(after, "jetway_events_retried_total") == 0
    assert delta(after, "jetway_events_dead_lettered_total") == 0
    assert member("never-1") not in runner.queue.scheduled


async def test_consumer_lag_is_what_the_consumer_still_has_to_deliver(client: Client, started: Started, scrape: Scraper) -> None:
    """A backlog exists when a feed subscribes behind the stream: events appended while the start-up pass runs.
    One event a batch, the first of the backlog held in its reconcile: the lag is the ten behind it, then none."""
    name = "metered-lag"
    store = EventStore(client, producer="watcher")
    await publish(store, "first")
    service = Gated(name)
    service.gates = {"first": asyncio.Event(), "held": asyncio.Event()}
    runner = started.start(service, RunnerSettings(batch=1))
    await eventually(lambda: "first" in service.waiting, timeout=20, message="the start-up pass reconciling `first`")
    await publish(store, "held", *(f"behind-{i}" for i in range(10)))
    service.gates["first"].set()
    await eventually(lambda: "held" in service.waiting, timeout=20, message="`held` delivered and reconciling")

    lag = ("jetway_consumer_lag", frozenset({"service": name, "feed": "*"}.items()))
    assert (await scrape())[lag] == 10
    service.gates["held"].set()
    await eventually(lambda: runner.seen.get(member("behind-9").subject()), message="the backlog handled")
    await eventually(lambda: _when(scrape(), lambda s: s.get(lag) == 0), message="no lag once the backlog is handled")
    runner.stop()
    await eventually(lambda: _when(scrape(), lambda s: lag not in s), message="a stopped runner's lag gone")


async def test_snapshots_written_and_leases_held_are_reported(client: Client, started: Started, scrape: Scraper) -> None:
    name = "metered-snapshots"
    runner = started.start(Gated(name))
    await within(runner.ready.wait(), 20)
    await publish(EventStore(client, producer="watcher"), "kept")
    await eventually(lambda: runner.seen.get(member("kept").subject()), message="the event folded")
    before = await scrape()
    assert await runner.snapshot()
    after = await scrape()
    written = "jetway_snapshots_written_total"
    assert value(after, written, service=name) - value(before, written, service=name) == 1

    group = "metered-leases"
    leases = Leases(client.jetstream(timeout=2), group, ("p1", "p2", "p3"), replica="r1", settings=LeaseSettings(2.0))
    running = asyncio.create_task(leases.run())
    try:
        await eventually(lambda: _when(scrape(), lambda s: value(s, "jetway_leases_held", service=group) == 3), message="3 leases held")
    finally:
        leases.stop()
        await within(running, 10)
    assert ("jetway_leases_held", frozenset({("service", group)})) not in await scrape()


async def _when(samples: Awaitable[Samples], check: Callable[[Samples], bool]) -> Samples | None:
    """The scraped samples when `check` holds of them, else None (for `eventually`)."""
    got = await samples
    return got if check(got) else None
