"""Standalone, the built-in providers register through the watcher, the one writer of every `spec`: the
workload service asks (`ProviderRegistered` on its own facet), the watcher records it. A config a user applied
is left alone; a registered one that differs from the built-in (an older release's) is upgraded; a deleted one
comes back, as the workload service re-creates it in a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from contracts.events import Envelope
from contracts.subjects import Key, facet_filter
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.service import Runner
from services import catalog
from services.selector.handlers import SelectorService
from services.workload.providers import BUILTIN, builtin_configs
from testbed.waiting import eventually
from tests.contracts.cases import changed
from tests.support.stack import Stack, running_pipeline, started

VLLM = Key("InferenceProviderConfig", "", "vllm")


@pytest.fixture
async def services(stack: Stack) -> AsyncIterator[list[Runner]]:
    async with running_pipeline(stack.nats_url) as runners:
        yield runners


def builtin(name: str) -> dict[str, Any]:
    return next(c for c in builtin_configs() if c["metadata"]["name"] == name)


async def spec_of(stack: Stack, name: str) -> dict[str, Any] | None:
    code, body = await stack.get(f"/v1/kinds/inferenceproviderconfig/{name}")
    return body if code == 200 else None


async def specs_written_by(stack: Stack) -> set[str]:
    nc = await connect(stack.nats_url, name="observer")
    try:
        items = await EventStore(nc, producer="test").read(facet_filter("spec"))
    finally:
        await nc.close()
    return {i.producer for i in items if isinstance(i, Envelope)}


async def test_the_built_in_providers_are_recorded_by_the_watcher_alone(stack: Stack, services: list[Runner]) -> None:
    for config in builtin_configs():
        await eventually(lambda c=config: spec_of(stack, c["metadata"]["name"]), message=f"{config['metadata']['name']} registered")
    assert await specs_written_by(stack) == {"watcher"}
    state = stack.watcher.service.state.resources.items[VLLM]
    assert state.registered and state.spec == builtin("vllm")["spec"]


async def test_a_users_config_stands_and_a_deleted_one_comes_back(stack: Stack, services: list[Runner]) -> None:
    await eventually(lambda: spec_of(stack, "vllm"), timeout=30, message="vllm registered")
    mine = changed(builtin("vllm"), {"metadata.labels": {"team": "ours"}})
    status, body = await stack.apply(mine)
    assert status == 200, body
    workload = services[2]
    await workload.reconcile_all()  # a level-triggered pass: the workload would ask again if it were to
    found = await spec_of(stack, "vllm")
    assert found is not None and found["metadata"]["labels"]["team"] == "ours"
    assert not stack.watcher.service.state.resources.items[VLLM].registered

    assert (await stack.delete("/v1/kinds/inferenceproviderconfig/vllm"))[0] == 200

    async def back() -> bool:
        again = await spec_of(stack, "vllm")
        return again is not None and "team" not in (again["metadata"].get("labels") or {})

    await eventually(back, timeout=30, message="the built-in vllm config back after its deletion")
    assert stack.watcher.service.state.resources.items[VLLM].registered


async def test_a_registration_read_before_a_users_apply_does_not_overwrite_it(stack: Stack, services: list[Runner]) -> None:
    """The watcher reads a pending registration, a user's apply lands, then the registration is applied: the
    user's config must stand (the check is made under the apply's lock, not before it)."""
    await eventually(lambda: spec_of(stack, "vllm"), timeout=30, message="vllm registered")
    assert (await stack.apply(changed(builtin("vllm"), {"metadata.labels": {"team": "ours"}})))[0] == 200
    await stack.watcher.service.apply(builtin("vllm"), dry_run=False, registered=True)
    found = await spec_of(stack, "vllm")
    assert found is not None and found["metadata"]["labels"]["team"] == "ours"
    assert not stack.watcher.service.state.resources.items[VLLM].registered


async def test_a_registered_config_from_an_older_release_is_upgraded(stack: Stack, services: list[Runner]) -> None:
    await eventually(lambda: spec_of(stack, "vllm"), timeout=30, message="vllm registered")
    older = changed(builtin("vllm"), {"metadata.annotations": {"airunway.ai/description": "an older release's words"}})
    plan = await stack.watcher.service.apply(older, dry_run=False, registered=True)  # as an older release recorded it
    assert not hasattr(plan, "problems"), plan
    workload = services[2]
    await workload.reconcile_all()

    async def upgraded() -> bool:
        found = await spec_of(stack, "vllm")
        return found is not None and found["metadata"].get("annotations") == builtin("vllm")["metadata"].get("annotations")

    await eventually(upgraded, timeout=30, message="the registered config upgraded to this release's")


async def test_start_up_goes_on_once_the_selector_has_folded_every_built_in_provider(stack: Stack) -> None:
    """`jetway up` opens its API when `providers_known` answers: by then the selector must know every built-in
    provider, or a first apply is chosen among some of them. The wait begins before the services run (nothing
    known) and is answered by the selector's fold, not found by a poll."""
    nc = await connect(stack.nats_url, name="pipeline")
    runners = await started(nc, catalog.PIPELINE)
    selector = runners[0].service
    assert isinstance(selector, SelectorService) and not selector.state.providers
    known = asyncio.create_task(catalog.providers_known(runners, timeout=30))
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        assert await known
        assert set(BUILTIN) <= selector.state.providers.keys()  # no await between: known when it answered
    finally:
        for runner in runners:
            runner.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await nc.close()


async def test_a_provider_never_folded_lets_the_wait_end_after_its_timeout() -> None:
    """A user's own configs standing in the built-ins' place: start-up goes on (False) after the timeout."""
    selector = SelectorService()
    assert not await selector.knows({"someone-elses"}, timeout=0.05)
