"""Two standalone watchers on one NATS (two `jetway up` front doors, or a watcher replaced while the old one still
runs) with two workload replicas asking for the built-in providers' registration: each registration is recorded
once, and neither watcher reports a failure."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from contracts.events import Envelope, ResourceApplied
from contracts.subjects import SPEC, Key
from runtime.bus import connect
from runtime.eventstore import EventStore
from services.workload.providers import BUILTIN
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.replicas import running_replicas
from tests.support.stack import running_stack

PROVIDERS = "/v1/kinds/InferenceProviderConfig"


async def test_two_standalone_watchers_record_each_built_in_registration_once(
    nats: NatsEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with (
        running_stack(nats.url, tmp_path / "a") as a,
        running_stack(nats.url, tmp_path / "b") as b,
        running_replicas(nats.url, 2, ttl=10.0, services=("workload",)),
    ):

        async def registered(stack: object) -> bool:
            status, found = await stack.get(PROVIDERS)  # type: ignore[attr-defined]
            return status == 200 and {i["metadata"]["name"] for i in found["items"]} >= set(BUILTIN)

        await eventually(lambda: registered(a), timeout=30, message="every built-in provider registered (a)")
        await eventually(lambda: registered(b), timeout=30, message="every built-in provider registered (b)")
    nc = await connect(nats.url, name="test")
    try:
        store = EventStore(nc, producer="test")
        for name in BUILTIN:
            history = await store.history(Key("InferenceProviderConfig", "", name))
            applied = [i for i in history if isinstance(i, Envelope) and i.facet == SPEC and isinstance(i.event, ResourceApplied)]
            assert len(applied) == 1, (name, [i.seq for i in applied])
    finally:
        await nc.close()
    # Jetway's own warnings and errors (another test's garbage, collected on this loop, logs under asyncio's name)
    failures = [r.getMessage() for r in caplog.records if r.name.startswith("jetway") and r.name != "jetway.leases"]
    assert failures == []
