"""`GET /v1/console/events/{id}` over real HTTP, on a standalone stack with the pipeline: where an event lives (its
resource and stream sequence), found from the watcher's index, from a scan of the stream past the index's bound, or
refused with the API's JSON error. The timeline follows causation links with it (docs/console.md)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from runtime.service import Runner, RunnerSettings
from runtime.snapshots import SnapshotSettings
from services.console.events import EventIndex
from services.console.handlers import ConsoleService
from testbed.waiting import eventually
from tests.contracts.cases import IPC, MD, changed
from tests.support.stack import Stack

# A CPU-only trtllm deployment: no built-in provider runs it, so the selector fails it and waits for a provider
# that does. `ACME` is one; its arrival is what the deployment's ProviderSelected is caused by: another resource.
CPU_TRT = {"metadata.name": "cpu-trt", "spec.engine": {"type": "trtllm"}, "spec.resources": {"gpu": {"count": 0}}}
ACME_TRT = {
    "spec.capabilities": {"engines": [{"name": "trtllm", "servingModes": ["aggregated"], "cpuSupport": True}]},
    "spec.selectionRules": [{"condition": "spec.engine.type == 'trtllm'", "priority": 10}],
}


async def events_of(stack: Stack, kind: str, name: str) -> list[dict[str, Any]]:
    status, body = await stack.get(f"/v1/kinds/{kind}/{name}/history?limit=1000")
    return list(body["events"]) if status == 200 else []


async def event_of_type(stack: Stack, kind: str, name: str, prefix: str) -> dict[str, Any] | None:
    return next((e for e in await events_of(stack, kind, name) if e["type"].startswith(prefix)), None)


async def caused_by_a_provider(stack: Stack, *, acme_applies: int = 1) -> dict[str, Any]:
    """The deployment `cpu-trt`'s ProviderSelected, caused by an event of the provider that made it possible."""
    status, _ = await stack.apply(changed(MD, CPU_TRT))
    assert status == 201
    await eventually(lambda: event_of_type(stack, "md", "cpu-trt", "SelectionFailed"), timeout=20, message="selection failed")
    for index in range(acme_applies - 1):  # earlier versions of the provider, which do not run it: a longer history
        await stack.apply(changed(IPC, {"metadata.labels": {"version": str(index)}}))
    acme = changed(IPC, ACME_TRT)
    acme["status"] = {"ready": True}
    status, _ = await stack.apply(acme)
    assert status in (200, 201)
    return await eventually(lambda: event_of_type(stack, "md", "cpu-trt", "ProviderSelected"), timeout=20, message="provider selected")


async def test_an_event_id_leads_to_its_resource_and_sequence_even_another_resources(stack: Stack) -> None:
    selected = await caused_by_a_provider(stack)
    cause = selected["causation_id"]
    status, where = await stack.get(f"/v1/console/events/{cause}?before={selected['seq']}")
    assert status == 200, where
    assert (where["id"], where["kind"], where["namespace"]) == (cause, "InferenceProviderConfig", None)
    # it is the event with that id in that resource's history, at that sequence
    there = {e["id"]: e for e in await events_of(stack, "InferenceProviderConfig", where["name"])}
    assert there[cause]["seq"] == where["seq"] and there[cause]["type"] == where["type"] and where["seq"] < selected["seq"]
    assert where["facet"] in ("spec", "reported")

    # an event of the same resource: the storage plan answered the deployment's spec
    planned = await eventually(lambda: event_of_type(stack, "md", "cpu-trt", "StoragePlanned"), timeout=20, message="storage planned")
    status, spec = await stack.get(f"/v1/console/events/{planned['causation_id']}")
    applied = (await events_of(stack, "md", "cpu-trt"))[0]
    assert status == 200 and (spec["kind"], spec["namespace"], spec["name"]) == ("ModelDeployment", "default", "cpu-trt")
    assert (spec["seq"], spec["type"], spec["facet"]) == (applied["seq"], "ResourceApplied.v1", "spec")

    # like every /v1 route: nothing without the token or a session
    async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{stack.api_url}/v1/console/events/{cause}") as response:
        assert response.status == 401 and (await response.json())["code"] == "unauthorized"


async def test_an_id_of_no_event_is_a_404_and_a_bad_one_a_400_naming_the_field(stack: Stack) -> None:
    await stack.apply(MD)
    status, body = await stack.get("/v1/console/events/0b3e7a52-0000-4000-8000-000000000000")
    assert status == 404 and body["code"] == "not_found" and "no event 0b3e7a52-0000-4000-8000-000000000000" in body["error"]
    for path, field in (("/v1/console/events/a%20b", "id"), ("/v1/console/events/abc?before=x", "before")):
        status, body = await stack.get(path)
        assert (status, body["code"], body["path"]) == (400, "invalid_request", field), body
        assert body["error"].startswith(f"{field}: ")


async def test_past_the_index_bound_an_id_is_found_by_a_bounded_scan_of_the_stream(stack: Stack) -> None:
    await stack.apply(MD)
    applied = (await events_of(stack, "md", "qwen"))[0]
    # an index that holds two ids only, fed from here on: the spec applied above is not among them
    stack.front.index = EventIndex(bound=2)
    for replicas in (2, 3, 4):
        await stack.apply(changed(MD, {"spec.scaling": {"replicas": replicas}}))
    assert stack.front.index.get(applied["id"]) is None
    last = (await events_of(stack, "md", "qwen"))[-1]
    status, where = await stack.get(f"/v1/console/events/{applied['id']}?before={last['seq']}")
    assert status == 200, where
    assert (where["kind"], where["name"], where["seq"]) == ("ModelDeployment", "qwen", applied["seq"])
    # a cause is stored before what names it: a scan that ends before the event itself does not find it
    status, body = await stack.get(f"/v1/console/events/{applied['id']}?before={applied['seq']}")
    assert status == 404 and body["code"] == "not_found" and "not among the events the index holds" in body["error"]


async def test_the_index_is_fed_by_the_rebuild_at_start_up(stack: Stack) -> None:
    await stack.apply(MD)
    applied = (await events_of(stack, "md", "qwen"))[0]
    # a second console service, rebuilt from the stream as a restarted `jetway up` (or the cluster console) does
    service = ConsoleService()
    runner = Runner(service, stack.watcher.runner.nc, RunnerSettings(snapshots=SnapshotSettings(enabled=False)))
    await runner.rebuild()
    assert service.index.get(applied["id"]) == applied["seq"]
    assert 0 < len(service.index) <= runner.replayed, "every event replayed is indexed (but an unreadable one)"


async def test_an_event_the_stream_no_longer_stores_is_said_to_be_gone(stack: Stack) -> None:
    per_facet = stack.watcher.runner.settings.streams.history_per_facet
    if not 0 < per_facet <= 100:
        pytest.skip(f"the stream keeps {per_facet} events per facet (JETWAY_HISTORY_PER_FACET): too many to trim here")
    await stack.apply(MD)
    first = (await events_of(stack, "md", "qwen"))[0]
    for index in range(per_facet):  # a label each time: a new spec event, the oldest of the facet trimmed
        await stack.apply(changed(MD, {"metadata.labels": {"try": str(index)}}))
    assert stack.front.index.get(first["id"]) == first["seq"], "the index still points at it"
    status, body = await stack.get(f"/v1/console/events/{first['id']}")
    assert status == 404 and body["code"] == "gone" and "no longer stored" in body["error"], body
    assert stack.front.index.get(first["id"]) is None, "and forgets it"
