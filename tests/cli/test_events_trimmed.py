"""`jetway events` says where the history it shows no longer starts at the beginning."""

from __future__ import annotations

import asyncio

from contracts.events import StatusCondition, StatusReported, StatusSlice
from contracts.subjects import ROUTER, Key
from runtime.bus import StreamSettings, connect, ensure_streams
from runtime.eventstore import EventStore
from tests.support.cli import run_jetway
from tests.support.nats import NatsEndpoint

GPU = Key("InferencePoolMember", "", "gpu-a")
OTHER = Key("InferencePoolMember", "", "gpu-b")


async def fill(url: str, per_facet: int, flips: int) -> None:
    nc = await connect(url, name="fill")
    await ensure_streams(nc.jetstream(), StreamSettings(history_per_facet=per_facet))
    store = EventStore(nc, producer="router")
    seq = 0
    for n in range(flips):
        phase = "Healthy" if n % 2 == 0 else "Unhealthy"
        slice_ = StatusSlice(phase=phase, conditions=(StatusCondition(type="Healthy", status=str(n % 2 == 0), reason="Probe"),))
        seq = (await store.append(GPU.subject(ROUTER), StatusReported(generation=1, status=slice_), expected_seq=seq)).seq or 0
    healthy = StatusSlice(phase="Healthy", conditions=(StatusCondition(type="Healthy", status="True", reason="Probe"),))
    await store.append(OTHER.subject(ROUTER), StatusReported(generation=1, status=healthy), expected_seq=0)
    await nc.close()


def test_events_says_when_a_facets_history_was_trimmed(nats: NatsEndpoint) -> None:
    asyncio.run(fill(nats.url, per_facet=3, flips=6))
    shown = run_jetway("events", "--nats", nats.url)
    assert shown.returncode == 0, shown.stderr
    notes = [line for line in shown.stdout.splitlines() if line.startswith("#")]
    assert notes == [
        "# history trimmed: the stream no longer holds events before sequence 4",
        "# history trimmed: InferencePoolMember/gpu-a [router] had events before sequence 4 that are no longer stored"
        " (the stream keeps the latest 3 events of each facet)",
    ]
    rows = [line.split()[0] for line in shown.stdout.splitlines()[1:] if not line.startswith("#")]
    assert rows == ["4", "5", "6", "7"]
    one = run_jetway("events", "ipm/gpu-b", "--nats", nats.url).stdout  # its whole history is there: no note for it
    assert "gpu-b [router] had events" not in one
    later = run_jetway("events", "--since", "5", "--nats", nats.url).stdout  # a point asked for: nothing said
    assert "history trimmed" not in later


def test_events_says_nothing_when_nothing_was_trimmed(nats: NatsEndpoint) -> None:
    asyncio.run(fill(nats.url, per_facet=10, flips=3))
    shown = run_jetway("events", "--nats", nats.url)
    assert shown.returncode == 0, shown.stderr
    assert "history trimmed" not in shown.stdout + shown.stderr
