"""A hand-over loses nothing a user sees: a fresh instance of a service, rebuilt from the stream (a
restart, another replica), knows what the one that ran knew, on a real NATS server.

- selector: the rules of a provider that failed to evaluate (its `SelectionRulesValid=False`) are folded
  from the stream, so the fresh instance's start-up pass does not report them valid again;
- watcher: resources and what was observed of their objects are the same;
- console: probe times, a cache fed by the router's signals (services/console/projection.py), are refilled
  within a probe interval, and forgotten with the member, and a member's view is the same;
- gateway: members and their recorded health are the same, and it routes to the same members (the
  traffic counters are per process: services/router/projection.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from contracts.cluster import OBSERVED, ObjectObserved
from contracts.events import ResourceApplied, StatusReported, StatusSlice
from contracts.pipeline import SelectionRulesChecked
from contracts.subjects import REPORTED, SELECTOR, Key
from runtime.bus import EVENTS_STREAM, connect, ensure_streams
from runtime.eventstore import EventStore
from runtime.resources import Resources
from runtime.service import Runner
from services.console.handlers import ConsoleService
from services.router import main as router_main
from services.router import policy
from services.router.projection import Members
from services.selector.handlers import SelectorService
from services.watcher import main as watcher_main
from testbed.waiting import eventually
from tests.contracts.cases import IPC, MD, MEMBER, changed
from tests.support.nats import NatsEndpoint
from tests.support.stack import SETTINGS, running_stack

BROKEN_RULE = "spec.nowhere.count > 1"  # compiles, fails to evaluate on every spec
ECHO = {"spec.backend": "echo", "spec.url": ""}  # a member that dials nothing


async def test_a_fresh_selector_knows_the_rules_that_failed_and_does_not_report_them_valid_again(nats: NatsEndpoint) -> None:
    nc = await connect(nats.url, name="test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        store = EventStore(nc, producer="watcher")
        provider = Key("InferenceProviderConfig", "", "acme")
        spec = changed(IPC, {"spec.selectionRules": [{"condition": BROKEN_RULE, "priority": 5}]})["spec"]
        await store.append(provider.subject(), ResourceApplied(kind=provider.kind, namespace="", name="acme", generation=1, spec=spec))
        await store.append(provider.subject(REPORTED), StatusReported(status=StatusSlice(fields={"ready": True})))
        selector = SelectorService()
        first = Runner(selector, nc, SETTINGS)
        running = asyncio.create_task(first.run())
        try:
            await asyncio.wait_for(first.ready.wait(), 20)
            md = Key("ModelDeployment", "default", "qwen")
            md_spec = changed(MD, {"spec.engine": {}})["spec"]  # no engine, no provider named: scored by the rules
            await store.append(md.subject(), ResourceApplied(kind=md.kind, namespace="default", name="qwen", generation=1, spec=md_spec))

            def recorded() -> SelectionRulesChecked | None:
                config = selector.state.providers.get("acme")
                found = config.rules_status if config is not None else None
                return found if isinstance(found, SelectionRulesChecked) and found.failures else None

            checked = await eventually(recorded, timeout=15, message="the broken rule reported on the provider")
            assert checked.status.conditions[0].status == "False" and BROKEN_RULE in checked.status.conditions[0].message
            await eventually(lambda: selector.state.deployments[md].decision is not None, timeout=15, message="selected")
        finally:
            first.stop()
            await asyncio.wait_for(running, 20)

        replica = SelectorService()
        fresh = Runner(replica, nc, SETTINGS)
        await fresh.rebuild()
        assert replica.state == selector.state
        assert replica.state.providers["acme"].rule_failures == checked.failures
        last = (await js.stream_info(EVENTS_STREAM)).state.last_seq
        await fresh.reconcile_all()  # its start-up pass: the provider first, then the deployment
        assert (await js.stream_info(EVENTS_STREAM)).state.last_seq == last  # nothing to say: the failure still stands
        history: list[object] = []
        await store.scan(provider.subject(SELECTOR), lambda item: history.append(getattr(item, "event", None)))
        assert history[-1] == checked  # the provider's first pass said valid; the deployment's scoring, not
    finally:
        await nc.close()


def facts(resources: Resources) -> dict[Key, tuple[object, ...]]:
    """What the events say of each resource (the times aside: a writer knows its own appends by its clock until
    it reads them back with the stream's; docs/event-store.md, "Snapshots")."""
    return {
        key: (
            s.generation,
            s.spec,
            s.labels,
            s.annotations,
            s.uid,
            s.resource_version,
            s.deleting,
            {o: e.event for o, e in s.decisions.items()},
        )
        for key, s in resources.items.items()
    }


async def test_a_watcher_taking_over_has_the_same_resources_and_observations(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path) as stack:
        first = stack.watcher.service
        # what the cluster showed of a deployment's objects, its deletion, then its objects garbage-collected
        store = EventStore(stack.watcher.runner.nc, producer="watcher")
        md = Key("ModelDeployment", "default", "qwen")
        await stack.apply(MD)
        for exists in (True, False):
            await store.append(
                md.subject(OBSERVED), ObjectObserved(api_version="v1", object_kind="Service", object_name="qwen", exists=exists)
            )
        keep = Key("ModelDeployment", "default", "kept")
        await stack.apply(changed(MD, {"metadata.name": "kept"}))
        await store.append(keep.subject(OBSERVED), ObjectObserved(api_version="v1", object_kind="Service", object_name="kept"))
        assert (await stack.delete("/v1/kinds/md/qwen"))[0] == 200
        await eventually(lambda: (keep, "Service", "kept") in first.state.observed, timeout=15, message="the first watcher folded it")
        assert [k for k in first.state.observed if k[0] == md] == []

        nc = await connect(nats.url, name="replica")
        second = watcher_main.build(nc, settings=SETTINGS)
        running = asyncio.create_task(second.runner.run())
        try:
            await asyncio.wait_for(second.runner.ready.wait(), 20)
            state = second.service.state
            assert facts(state.resources) == facts(first.state.resources)
            assert state.observed == first.state.observed
            # the hand-over: the first stops consuming, the replica takes the events
            stack.watcher.runner.stop()
            await store.append(
                keep.subject(OBSERVED), ObjectObserved(api_version="v1", object_kind="Service", object_name="kept", exists=False)
            )
            await eventually(lambda: (keep, "Service", "kept") not in state.observed, timeout=15, message="the replica folded it")
        finally:
            second.runner.stop()
            await asyncio.wait_for(running, 20)
            await nc.close()


async def test_a_console_replica_refills_probe_times_and_forgets_them_with_the_member(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path) as stack:
        status, body = await stack.apply(changed(MEMBER, ECHO))
        assert status == 201, body
        member = Key("InferencePoolMember", "", "gpu-a")
        first = stack.front.state
        await eventually(lambda: member.subject() in first.probed_at, timeout=15, message="the first console got a probe signal")

        nc = await connect(nats.url, name="replica")
        second = ConsoleService()
        runner = Runner(second, nc, SETTINGS)
        running = asyncio.create_task(runner.run())
        try:
            await asyncio.wait_for(runner.ready.wait(), 20)
            state = second.state
            assert facts(state.resources) == facts(first.resources)

            def same_probe_time() -> bool:
                return state.probed_at.get(member.subject()) == first.probed_at.get(member.subject()) is not None

            await eventually(same_probe_time, timeout=15, message="the replica got the next probe signal")
            assert state.status_view(state.resources.items[member]) == first.status_view(first.resources.items[member])

            assert (await stack.delete("/v1/kinds/ipm/gpu-a"))[0] == 200
            await eventually(lambda: member not in state.resources.items, timeout=15, message="the replica folded the deletion")
            gateway = stack.router.runner
            ticks = gateway.passes
            await eventually(lambda: gateway.passes >= ticks + 2, timeout=15, message="two more probe ticks")
            assert member.subject() not in state.probed_at and member.subject() not in first.probed_at
        finally:
            runner.stop()
            await asyncio.wait_for(running, 20)
            await nc.close()


async def test_a_fresh_gateway_has_the_same_members_and_routes_to_the_same_ones(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path) as stack:
        for name in ("gpu-a", "gpu-b"):
            status, body = await stack.apply(changed(MEMBER, {"metadata.name": name, **ECHO}))
            assert status == 201, body
        await eventually(lambda: stack.served("qwen", "gpu-b"), timeout=15, message="both members served")
        await eventually(lambda: stack.served("qwen", "gpu-a"), timeout=15, message="both members served")
        live = stack.router.service.members

        nc = await connect(nats.url, name="replica")
        fresh = router_main.build(nc, stack.secrets, settings=SETTINGS)
        try:
            await fresh.runner.rebuild()
            await fresh.runner.reconcile_all()  # the start-up pass, before a router would listen: every member probed
            members = fresh.service.members
            assert members.items == live.items and members.by_model == live.by_model

            def routable(found: Members) -> list[str]:
                return sorted(m.name for m in policy.candidates(found, "qwen", "openai-chat").ready)

            assert routable(members) == routable(live) == ["gpu-a", "gpu-b"]
            assert all(t.outstanding == 0 and not t.failed for t in members.traffic.values())
        finally:
            fresh.routes.pool.close()
            await nc.close()
