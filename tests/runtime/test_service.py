"""The service loop against a real nats-server: crashes, restarts, poison events, traces."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contracts.events import Envelope, ResourceApplied, StatusReported, StatusSlice
from contracts.subjects import Key, facet_filter, kind_filter
from runtime.bus import DLQ_STREAM, EVENTS_STREAM
from runtime.eventstore import EventStore
from runtime.service import Again, Effects, Permanent, Runner, RunnerSettings, Service, Temporary
from runtime.workqueue import backoff_delay
from testbed.waiting import eventually, within
from tests.support.ack_service import AckService
from tests.support.nats import NatsEndpoint

ROOT = Path(__file__).resolve().parents[2]
Started = list[tuple[Runner, "asyncio.Task[None]"]]
FAST = RunnerSettings(backoff=(0.05,), backoff_cap=0.4)


def member(name: str) -> Key:
    return Key("InferencePoolMember", "", name)


def applied(key: Key, generation: int) -> ResourceApplied:
    return ResourceApplied(kind=key.kind, namespace="", name=key.name, generation=generation, spec={"backend": "echo"})


async def decisions_of(store: EventStore, service: str) -> list[Envelope]:
    return [i for i in await store.read(facet_filter(service)) if isinstance(i, Envelope)]


class ServiceProcess:
    """The ack service in its own process, so that a test can SIGKILL it."""

    def __init__(self, url: str, name: str, dump: Path) -> None:
        self.ready_file = dump.with_suffix(".ready")
        self.args = [sys.executable, "-m", "tests.support.ack_service", "--nats", url, "--name", name, "--dump", str(dump)]
        self.args += ["--ready", str(self.ready_file)]
        self.dump = dump
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        self.ready_file.unlink(missing_ok=True)
        self.process = subprocess.Popen(self.args, cwd=ROOT, stderr=subprocess.DEVNULL)
        return self

    def ready(self) -> bool:
        """Rebuilt and past its start-up pass."""
        return self.ready_file.exists()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def terminate(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=20)

    def state(self) -> dict[str, list[int]]:
        return dict(json.loads(self.dump.read_text()))


class Processes:
    """The test's service processes, killed at its end whatever its outcome (none outlives a failed test)."""

    def __init__(self) -> None:
        self.all: list[ServiceProcess] = []

    def started(self, process: ServiceProcess) -> ServiceProcess:
        self.all.append(process)
        return process.start()


@pytest.fixture
def processes() -> Iterator[Processes]:
    found = Processes()
    yield found
    for process in found.all:
        if process.process is not None and process.process.poll() is None:
            process.kill()


async def test_service_killed_mid_burst_reaches_the_same_projection_with_no_effect_twice(
    nats: NatsEndpoint, client: Client, tmp_path: Path, processes: Processes
) -> None:
    store = EventStore(client, producer="watcher")
    steady = processes.started(ServiceProcess(nats.url, "steady", tmp_path / "steady.json"))
    victim = processes.started(ServiceProcess(nats.url, "victim", tmp_path / "victim.json"))
    for process in (steady, victim):
        await eventually(process.ready, timeout=30, message="the service started")

    keys = [member(f"m{i}") for i in range(250)]
    final = {}

    async def burst() -> None:
        for generation in range(1, 5):  # 1,000 events: four generations of 250 members
            for key in keys:
                await store.append(key.subject(), applied(key, generation))
                final[key] = generation

    producer = asyncio.create_task(burst())

    async def victim_mid_burst() -> bool:
        return len(await decisions_of(store, "victim")) > 300

    await eventually(victim_mid_burst, timeout=60, message="victim handling the burst")
    assert not producer.done(), "the burst finished before the kill; the test would prove nothing"
    victim.kill()
    await producer
    victim.start()

    async def all_acked(service: str) -> bool:
        latest: dict[Key, int] = {}
        for envelope in await decisions_of(store, service):
            latest[envelope.key] = envelope.event.generation  # type: ignore[attr-defined]
        return latest == final

    for service in ("steady", "victim"):
        await eventually(lambda s=service: all_acked(s), timeout=60, message=f"{service} acknowledged every final generation")
        per_generation = Counter((e.key, e.event.generation) for e in await decisions_of(store, service))  # type: ignore[attr-defined]
        assert max(per_generation.values()) == 1, f"{service} acknowledged a generation twice"

    assert steady.terminate() == 0
    assert victim.terminate() == 0
    assert victim.state() == steady.state()
    assert len(victim.state()) == 250


async def test_nats_restarted_mid_burst_loses_no_acknowledged_event(nats: NatsEndpoint, client: Client, started: Started) -> None:
    store = EventStore(client, producer="watcher", append_timeout=60)
    service = AckService("acker")
    await _run(client, service, started)
    acknowledged: list[Envelope] = []

    async def burst() -> None:
        for i in range(1000):
            key = member(f"n{i % 100}")
            acknowledged.append(await store.append(key.subject(), applied(key, i // 100 + 1)))

    producer = asyncio.create_task(burst())
    await eventually(lambda: len(acknowledged) >= 300, timeout=60, message="a third of the burst stored")
    await asyncio.get_running_loop().run_in_executor(None, lambda: nats.restart(crash=True))
    await asyncio.wait_for(producer, 120)

    stored = [i for i in await store.read(facet_filter("spec")) if isinstance(i, Envelope)]
    assert Counter(e.id for e in stored) == Counter(e.id for e in acknowledged), "every acknowledged append stored exactly once"
    assert len(stored) == 1000
    await eventually(
        lambda: service.acked == service.generation and len(service.acked) == 100,
        timeout=60,
        message="the service caught up after the restart",
    )


@pytest.fixture
async def started() -> AsyncIterator[list[tuple[Runner, asyncio.Task[None]]]]:
    """Runners started by a test, stopped afterwards whatever the test's outcome."""
    running: list[tuple[Runner, asyncio.Task[None]]] = []
    yield running
    for runner, _ in running:
        runner.stop()
    await asyncio.wait_for(asyncio.gather(*(t for _, t in running), return_exceptions=True), 30)


async def _run(client: Client, service: AckService, started: Started, settings: RunnerSettings = FAST) -> tuple[Runner, asyncio.Task[None]]:
    runner = Runner(service, client, settings)
    task = asyncio.create_task(runner.run())
    started.append((runner, task))
    await asyncio.wait_for(runner.ready.wait(), 20)
    return runner, task


async def _dead_letters(client: Client) -> list[tuple[str, dict[str, str]]]:
    store = EventStore(client, producer="test", stream=DLQ_STREAM)
    found: list[tuple[str, dict[str, str]]] = []
    js = client.jetstream()
    last = await store.stream_last_seq()
    for seq in range(1, last + 1):
        msg = await js.get_msg(DLQ_STREAM, seq)
        found.append((msg.subject, dict(msg.headers or {})))
    return found


async def test_poison_event_goes_to_the_dead_letter_subject_and_the_consumer_keeps_going(client: Client, started: Started) -> None:
    service = AckService("acker")
    await _run(client, service, started)
    store = EventStore(client, producer="watcher")
    await client.jetstream().publish(member("poison").subject(), b"{not an event", stream=EVENTS_STREAM)
    after = member("after-poison")
    await store.append(after.subject(), applied(after, 1))
    await eventually(lambda: service.acked.get(after) == 1, message="the event after the poison handled")
    letters = await eventually(lambda: _dead_letters(client), message="a dead letter")
    subject, headers = letters[0]
    assert subject == "jetway.dlq.acker"
    assert headers["Jetway-Dlq-Subject"] == member("poison").subject()
    assert "malformed event payload" in headers["Jetway-Dlq-Reason"]


async def test_a_failing_reconcile_is_retried_per_key_with_a_growing_backoff_and_never_dead_lettered(
    client: Client, started: Started
) -> None:
    service = AckService("acker")
    runner, _ = await _run(client, service, started)
    store = EventStore(client, producer="watcher")
    failing, flaky, fine = member("fail-1"), member("flaky-1"), member("fine")
    for key in (failing, flaky, fine):
        await store.append(key.subject(), applied(key, 1))
    await eventually(lambda: service.acked.get(flaky) == 1 and service.acked.get(fine) == 1, message="flaky retried, fine handled")
    assert service.attempts[flaky] == 2
    assert flaky not in runner.queue.failures, "a key that reconciled has its failures forgotten"
    await eventually(lambda: service.attempts.get(failing, 0) >= 6, timeout=15, message="the failing key retried on and on")
    assert runner.queue.failures[failing] >= 5
    assert failing in runner.queue.scheduled, "its next try is scheduled"
    assert failing not in service.acked
    assert await _dead_letters(client) == [], "a reconcile that fails is retried, never dead-lettered"


def test_a_keys_backoff_follows_the_settings_then_doubles_up_to_the_cap() -> None:
    assert [backoff_delay(n, (0.05, 0.1), 1.0) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [backoff_delay(n, (0.2,), 60.0) for n in (1, 2, 10, 20)] == [0.2, 0.4, 60.0, 60.0]


class Answering(Service):
    """Reconciles InferencePoolMembers and answers by name: `temp-*` raises Temporary with the delay its spec names,
    `never-*` raises Permanent (from an error that holds a secret), `again-*` returns Again(after its delay);
    a member whose spec says `fold: fail` cannot be folded. Counts the reconciles of each key."""

    consumes = (kind_filter("InferencePoolMember"),)

    def __init__(self, name: str) -> None:
        self.name = name
        self.delays: dict[Key, float] = {}
        self.runs: Counter[Key] = Counter()

    def fold(self, envelope: Envelope) -> None:
        event = envelope.event
        if isinstance(event, ResourceApplied):
            if event.spec.get("fold") == "fail":
                raise ValueError("this spec cannot be folded")
            self.delays[envelope.key] = float(event.spec.get("delay", 0.05))

    def keys(self) -> Iterable[Key]:
        return list(self.delays)

    async def reconcile(self, key: Key, effects: Effects) -> Again | None:
        self.runs[key] += 1
        delay = self.delays.get(key, 0.05)
        if key.name.startswith("temp-"):
            raise Temporary("the registry is busy", delay=delay)
        if key.name.startswith("never-"):
            try:
                raise ConnectionError("token=s3cr3t refused")
            except ConnectionError:
                raise Permanent("the model is gated: ask for access") from None
        if key.name.startswith("again-"):
            return Again(after=delay)
        return None


def answering(key: Key, delay: float = 0.05, **spec: str) -> ResourceApplied:
    return ResourceApplied(kind=key.kind, namespace="", name=key.name, generation=1, spec={"backend": "echo", "delay": delay, **spec})


async def test_temporary_retries_after_its_own_delay_and_again_looks_again_without_an_event(client: Client, started: Started) -> None:
    service = Answering("answering")
    runner, _ = await _run(client, service, started)
    store = EventStore(client, producer="watcher")
    soon, late, again = member("temp-soon"), member("temp-late"), member("again-1")
    await store.append(soon.subject(), answering(soon, 0.05))
    await store.append(late.subject(), answering(late, 3600))
    await store.append(again.subject(), answering(again, 0.05))
    await eventually(lambda: service.runs[soon] >= 3, message="Temporary(delay=0.05) retried")
    await eventually(lambda: service.runs[again] >= 3, message="Again(after=0.05) reconciled again with no event")
    assert again not in runner.queue.failures, "Again is not a failure"
    assert service.runs[late] == 1, "Temporary(delay=3600) waits its hour"
    assert runner.queue.scheduled[late] - asyncio.get_running_loop().time() > 3000
    assert await _dead_letters(client) == []


async def test_permanent_is_recorded_with_its_reason_only_and_not_retried_until_the_key_changes(
    client: Client, started: Started, caplog: pytest.LogCaptureFixture
) -> None:
    service = Answering("answering")
    runner, _ = await _run(client, service, started)
    store = EventStore(client, producer="watcher")
    never, after = member("never-1"), member("after")
    with caplog.at_level(logging.ERROR, logger="jetway.service"):
        await store.append(never.subject(), answering(never))
        await eventually(lambda: runner.failed.get(never), message="the permanent failure recorded")
    await store.append(after.subject(), answering(after))
    await eventually(lambda: service.runs[after] == 1, message="the next event handled")
    assert service.runs[never] == 1, "not retried"
    assert never not in runner.queue.scheduled
    assert runner.failed == {never: "the model is gated: ask for access"}
    [record] = [r for r in caplog.records if getattr(r, "resource", None) == str(never)]
    assert record.reason == "the model is gated: ask for access"  # type: ignore[attr-defined]
    assert "s3cr3t" not in caplog.text
    assert await _dead_letters(client) == []

    await store.append(never.subject(), answering(never, 0.1))  # the key changed: reconciled again
    await eventually(lambda: service.runs[never] == 2, message="reconciled again once the key changed")


async def test_an_event_that_cannot_be_folded_is_dead_lettered_and_the_feed_goes_on(client: Client, started: Started) -> None:
    service = Answering("answering")
    await _run(client, service, started)
    store = EventStore(client, producer="watcher")
    broken, after = member("broken"), member("after-broken")
    await store.append(broken.subject(), answering(broken, fold="fail"))
    await store.append(after.subject(), answering(after))
    await eventually(lambda: service.runs[after] == 1, message="the event after it handled")
    letters = await eventually(lambda: _dead_letters(client), message="a dead letter")
    subject, headers = letters[0]
    assert subject == "jetway.dlq.answering"
    assert headers["Jetway-Dlq-Subject"] == broken.subject()
    assert "fold failed: ValueError: this spec cannot be folded" in headers["Jetway-Dlq-Reason"]
    assert broken not in service.runs


async def test_restarted_service_rebuilds_its_projection_and_re_emits_nothing(client: Client, started: Started) -> None:
    store = EventStore(client, producer="watcher")
    for i in range(50):
        key = member(f"r{i}")
        await store.append(key.subject(), applied(key, 1))
        await store.append(key.subject(), applied(key, 2))
    first = AckService("acker")
    runner, task = await _run(client, first, started)
    await eventually(lambda: len(first.acked) == 50 and set(first.acked.values()) == {2}, message="all acknowledged")
    runner.stop()
    await task
    before = await store.stream_last_seq()

    second = AckService("acker")
    await _run(client, second, started)  # ready: rebuilt, and its start-up pass over every member done
    assert second.state() == first.state()
    assert second.emitted == 0
    assert await store.stream_last_seq() == before, "a restart must not record anything new"


async def test_two_replicas_of_one_service_record_each_decision_once(client: Client, started: Started) -> None:
    # Two runners of every event (no leases dividing the work) both see each event and both decide:
    # what must hold is that each decision is recorded once, whichever replica makes it (the facet's guard).
    store = EventStore(client, producer="watcher")
    one, two = AckService("acker"), AckService("acker")
    await _run(client, one, started)
    await _run(client, two, started)
    keys = [member(f"d{i}") for i in range(40)]
    for key in keys:
        await store.append(key.subject(), applied(key, 1))

    async def all_decided() -> bool:
        return {e.key for e in await decisions_of(store, "acker")} == set(keys)

    await eventually(all_decided, message="every member acknowledged by one replica or the other")
    for runner, _ in started:
        await runner.reconcile_all()
    counts = Counter((e.key, e.event.generation) for e in await decisions_of(store, "acker"))  # type: ignore[attr-defined]
    assert len(counts) == 40 and set(counts.values()) == {1}


async def test_sigterm_stops_the_service_cleanly(nats: NatsEndpoint, client: Client, tmp_path: Path, processes: Processes) -> None:
    process = processes.started(ServiceProcess(nats.url, "graceful", tmp_path / "graceful.json"))
    await eventually(process.ready, timeout=30, message="started")
    store = EventStore(client, producer="watcher")
    await store.append(member("x").subject(), applied(member("x"), 1))
    await eventually(lambda: decisions_of(store, "graceful"), message="handled")
    assert process.terminate() == 0
    assert process.state() == {"InferencePoolMember/x": [1, 1]}


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


async def test_a_trace_started_by_a_producer_is_continued_by_the_consumer(
    client: Client, spans: InMemorySpanExporter, started: Started
) -> None:
    service = AckService("acker")
    await _run(client, service, started)
    store = EventStore(client, producer="watcher")
    key = member("traced")
    with trace.get_tracer("test").start_as_current_span("user applies a member") as producer_span:
        stored = await store.append(key.subject(), applied(key, 1))
    assert stored.trace.traceparent
    producer_context = producer_span.get_span_context()

    def consumer_spans() -> list[ReadableSpan]:  # the span ends a few loop turns after the handler has acked
        return [s for s in spans.get_finished_spans() if s.name == "acker reconcile" and s.attributes.get("jetway.resource") == str(key)]

    consumer = await eventually(consumer_spans, message="handled, and its span ended")
    assert service.acked.get(key) == 1
    assert consumer[0].context.trace_id == producer_context.trace_id
    assert consumer[0].parent is not None and consumer[0].parent.span_id == producer_context.span_id
    # the decision the consumer recorded carries the same trace onward
    decision = (await decisions_of(store, "acker"))[0]
    assert isinstance(decision.event, StatusReported)
    assert decision.trace.traceparent.split("-")[1] == f"{producer_context.trace_id:032x}"


class HeldAcker(AckService):
    """The ack service with a gate, to open a race's window on purpose: a reconcile of a held key reads the
    projection, says so on `waiting[key]`, and decides only once the test sets the key's gate."""

    def __init__(self, name: str, *, level_only: bool = False) -> None:
        super().__init__(name)
        self.level_only = level_only  # acknowledge in level-triggered passes only, as a decision left for the next resync
        self.gates: dict[Key, asyncio.Event] = {}
        self.waiting: dict[Key, asyncio.Event] = {}
        self.runs: Counter[Key] = Counter()

    def hold(self, key: Key) -> asyncio.Event:
        self.waiting[key] = asyncio.Event()
        self.gates[key] = asyncio.Event()
        return self.gates[key]

    async def reconcile(self, key: Key, effects: Effects) -> None:
        self.runs[key] += 1
        wanted, acked = self.generation.get(key), self.acked.get(key)  # the view this decision is made from
        if key in self.gates:
            self.waiting[key].set()
            await self.gates[key].wait()
        if wanted is None or acked == wanted or (self.level_only and not effects.level):
            return
        await effects.emit(key, StatusReported(generation=wanted, status=StatusSlice(phase="Seen")))


async def test_a_decision_made_from_a_stale_view_conflicts_and_is_made_again_from_the_fresh_one(client: Client, started: Started) -> None:
    # A resync pass reads the projection (generation 1, not acknowledged) and is held; meanwhile another
    # writer of the facet (a second replica) records the acknowledgement, and this runner's event batch folds
    # it. Appending after the facet's sequence as of the emit, the pass's stale decision landed on top (the
    # same decision twice); after the sequence as of the reconcile's start, it conflicts, and the key is
    # reconciled again from the fresh view, which has nothing left to record.
    service = HeldAcker("acker", level_only=True)
    runner, _ = await _run(client, service, started)
    key = member("raced")
    store = EventStore(client, producer="watcher")
    await store.append(key.subject(), applied(key, 1))
    await eventually(lambda: service.runs[key] == 1, message="the event reconciled (it leaves the decision to a pass)")

    gate = service.hold(key)
    resync = asyncio.create_task(runner.reconcile_all())
    await within(service.waiting[key].wait())
    replica = EventStore(client, producer="acker")
    await replica.append(key.subject("acker"), StatusReported(generation=1, status=StatusSlice(phase="Seen")), expected_seq=0)
    await eventually(lambda: service.acked.get(key) == 1, message="the other writer's decision folded by the event batch")
    gate.set()
    await within(resync)

    assert [e.event.generation for e in await decisions_of(store, "acker")] == [1]  # type: ignore[attr-defined]
    assert service.runs[key] >= 3, "the conflicting pass was reconciled again"


async def test_a_key_asked_again_while_reconciling_is_reconciled_once_more_and_other_keys_go_on(client: Client, started: Started) -> None:
    # The workqueue's promise: one reconcile of a key at a time; asked while it runs, the key is marked dirty
    # and reconciled once more after, however many times it was asked; other keys run meanwhile.
    service = HeldAcker("acker")
    runner, _ = await _run(client, service, started)
    busy, other = member("busy"), member("other")
    busy_gate, other_gate = service.hold(busy), service.hold(other)
    first = asyncio.create_task(runner.reconcile(busy))
    await within(service.waiting[busy].wait())
    again = [asyncio.create_task(runner.reconcile(busy)) for _ in range(5)]
    beside = asyncio.create_task(runner.reconcile(other))
    await within(service.waiting[other].wait())  # reached while busy is still held: the two keys overlap

    assert service.runs == {busy: 1, other: 1}
    assert not any(t.done() for t in again), "a request made while the key runs waits for the run after"
    busy_gate.set()
    other_gate.set()
    await within(asyncio.gather(first, beside, *again))
    assert service.runs == {busy: 2, other: 1}


async def test_a_runner_stops_even_when_nats_py_loses_the_cancellation_of_its_reader(
    client: Client, started: Started, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.11's `asyncio.wait_for`, which nats-py waits on for every request, drops a cancellation that meets the
    reply (runtime/tasks.py). Under CPU starvation it met a shard's reader as it made its consumer again: the reader
    followed its stream on, the shard never stopped, and its replica held its leases for good. Here the reader's
    consumer is deleted under it, and the new consumer's request swallows the cancellation as that wait_for does."""
    entered, dropped = asyncio.Event(), asyncio.Event()
    make_consumer = JetStreamContext.add_consumer

    async def add_consumer_dropping_a_cancellation(self: JetStreamContext, *args: Any, **kwargs: Any) -> Any:
        if not entered.is_set():
            entered.set()
            with contextlib.suppress(asyncio.CancelledError):  # the reply and the cancellation met: the reply wins
                await asyncio.sleep(60)
            dropped.set()
        return await make_consumer(self, *args, **kwargs)

    service = AckService("stopping")
    runner, task = await _run(client, service, started, RunnerSettings(backoff=(0.05,), heartbeat=0.2))
    js = client.jetstream()

    async def following() -> bool:
        return bool(await js.consumers_info(EVENTS_STREAM))

    await eventually(following, timeout=10, message="the runner following the stream")
    monkeypatch.setattr(JetStreamContext, "add_consumer", add_consumer_dropping_a_cancellation)
    for consumer in await js.consumers_info(EVENTS_STREAM):  # two silent heartbeats later the reader makes another
        await js.delete_consumer(EVENTS_STREAM, consumer.name)
    await asyncio.wait_for(entered.wait(), 10)
    runner.stop()
    await asyncio.wait_for(asyncio.shield(task), 15)  # before: the runner waited for its reader for ever
    assert dropped.is_set()
