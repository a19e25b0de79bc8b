"""The router's side of autoscaling (issue 25), over real HTTP and real NATS: requests held for a model starting
from zero and answered once its member is up, the bounds of holding, the Demand signal, and each member's load
published every probe tick. Nothing here sleeps: each step waits on what a user or the scaler sees (the held
gauge on /metrics, a signal received, an answer)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest
from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from contracts.objects import MODEL_DEPLOYMENT, MODEL_DEPLOYMENT_NAMESPACE
from contracts.poolmember import FORMAT_LABEL
from contracts.scaling import DEMAND_SIGNALS, LOAD_SIGNALS, SCALE_FROM_ZERO, Demand, MemberLoad
from runtime.bus import connect
from runtime.natsserver import free_port
from services.router import hold, protocol
from simulator.vllm import SimParams, VllmSimulator
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack, running_stack

AT_ZERO = {SCALE_FROM_ZERO: "true", MODEL_DEPLOYMENT: "qwen", MODEL_DEPLOYMENT_NAMESPACE: "team-a"}


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    # a slow tick: a member that comes up is found by the probes a held request asks for, not by the tick
    async with running_stack(nats.url, tmp_path, probe_interval=30.0) as running:
        yield running


@pytest.fixture
async def bus(nats: NatsEndpoint) -> AsyncIterator[Client]:
    nc = await connect(nats.url, name="scaler-stand-in")
    yield nc
    await nc.close()


@contextlib.asynccontextmanager
async def sdk(stack: Stack) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=stack.router_url, api_key="unused", max_retries=0) as client:
        yield client


async def member_at(stack: Stack, name: str, port: int, labels: dict[str, str], model: str = "qwen") -> None:
    """A member of `model` at 127.0.0.1:port, where nothing listens yet; returns once its probe found it down."""
    spec = {"backend": "vllm-openai", "url": f"http://127.0.0.1:{port}", "models": [{"name": model}]}
    doc = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": name, "labels": labels}, "spec": spec}
    status, body = await stack.apply(doc)
    assert status in (200, 201), body

    async def down() -> bool:
        return (await stack.status(name)).get("phase") == "Failed"

    await eventually(down, message=f"{name} probed down")


async def metric(stack: Stack, name: str, **labels: str) -> float:
    """A sample of the router's /metrics (0 when the series is not there)."""
    async with stack.http.get(stack.router_url.removesuffix("/v1") + "/metrics") as response:
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


async def outcomes(stack: Stack, outcome: str, model: str = "qwen") -> float:
    """Holds of `model` that ended so (the router's counters are the process's: a test reads what it added)."""
    return await metric(stack, "jetway_router_hold_outcomes_total", model=model, outcome=outcome)


async def held(stack: Stack, model: str = "qwen") -> float:
    return await metric(stack, "jetway_router_held_requests", model=model)


async def _held_is(stack: Stack, count: int) -> bool:
    return await held(stack) == count


async def subscribe(nc: Client, subject: str, into: list[Any], kind: type) -> None:
    async def received(msg: Any) -> None:
        into.append(msgspec.json.decode(msg.data, type=kind))

    await nc.subscribe(subject, cb=received)
    await nc.flush()


async def raw_chat(stack: Stack, model: str = "qwen", **headers: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    async with stack.http.post(f"{stack.router_url}/chat/completions", json=body, headers=headers) as response:
        return response.status, await response.json(content_type=None), dict(response.headers)


async def test_a_request_for_a_model_at_zero_waits_for_its_member_and_is_answered(stack: Stack, bus: Client) -> None:
    port = free_port()
    await member_at(stack, "qwen-0", port, AT_ZERO)
    demands: list[Demand] = []
    await subscribe(bus, DEMAND_SIGNALS, demands, Demand)
    released = await outcomes(stack, "released")
    async with sdk(stack) as client:
        asked = asyncio.create_task(client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}]))
        await eventually(lambda: demands, message="a Demand signal")
        first = demands[0]
        assert (first.model, first.deployment, first.held) == ("qwen", "team-a/qwen", 1)
        assert first.router and first.router == stack.router.service.router
        assert await held(stack) == 1
        await eventually(lambda: len(demands) >= 2, message="Demand again while it is held", timeout=5)
        assert not asked.done(), "held, not answered 503"
        async with VllmSimulator(["qwen"], port=port):  # the scaler's replica comes up
            answer = await asyncio.wait_for(asked, 20)
        assert answer.choices[0].message.content
    assert await held(stack) == 0
    assert await outcomes(stack, "released") == released + 1


async def test_a_member_gone_to_zero_since_its_last_probe_holds_the_request_instead_of_refusing_it(stack: Stack) -> None:
    """Its last probe found it Healthy; it has just scaled to zero (the next probe is 30 s away): the connection is
    refused, and the request is held as if the router already knew, then answered once the member is back."""
    port = free_port()
    spec = {"backend": "vllm-openai", "url": f"http://127.0.0.1:{port}", "models": [{"name": "qwen"}]}
    doc = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "qwen-0", "labels": AT_ZERO}}
    async with VllmSimulator(["qwen"], port=port):
        assert (await stack.apply({**doc, "spec": spec}))[0] in (200, 201)
        await eventually(lambda: stack.served("qwen"), message="qwen-0 Healthy")
    released = await outcomes(stack, "released")
    async with sdk(stack) as client:
        asked = asyncio.create_task(client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}]))
        await eventually(functools.partial(_held_is, stack, 1), message="held after the refused connection")
        async with VllmSimulator(["qwen"], port=port):  # the scaler's replica comes up
            answer = await asyncio.wait_for(asked, 20)
        assert answer.choices[0].message.content
    assert await outcomes(stack, "released") == released + 1


async def test_held_requests_are_released_in_arrival_order(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jetway.router")
    port = free_port()
    await member_at(stack, "qwen-0", port, AT_ZERO)
    asked = []
    for i in range(4):
        asked.append(asyncio.create_task(raw_chat(stack, **{"x-request-id": f"r{i}"})))
        await eventually(functools.partial(_held_is, stack, i + 1), message=f"{i + 1} held")
    upstream = FakeOpenAI(models=["qwen"], port=port)
    await upstream.start()
    try:
        answers = await asyncio.wait_for(asyncio.gather(*asked), 20)
    finally:
        await upstream.stop()
    assert [status for status, _, _ in answers] == [200] * 4
    released = [r.__dict__["request_id"] for r in caplog.records if r.getMessage().startswith("held request released")]
    assert released == ["r0", "r1", "r2", "r3"], "each one chose its member and went in the order it came"
    assert len(upstream.completions) == 4


async def test_a_held_stream_is_streamed_once_its_member_is_up(stack: Stack) -> None:
    port = free_port()
    await member_at(stack, "qwen-0", port, AT_ZERO)
    async with sdk(stack) as client:

        async def stream() -> str:
            chunks = await client.chat.completions.create(
                model="qwen", messages=[{"role": "user", "content": "tell me"}], stream=True, max_tokens=8
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

        streaming = asyncio.create_task(stream())
        await eventually(lambda: _held_is(stack, 1), message="the stream held")
        async with VllmSimulator(["qwen"], SimParams(decode_per_token=0.001, ttft_base=0.001), port=port):
            text = await asyncio.wait_for(streaming, 20)
    assert text.strip(), "the stream's tokens came after the release"


async def test_a_request_held_past_its_time_is_a_503_with_retry_after_in_the_apis_shape(stack: Stack) -> None:
    assert stack.router.routes.holds is not None
    stack.router.routes.holds.settings = hold.Settings(hold_max=64, hold_seconds=0.5)
    labels = {**AT_ZERO, f"{FORMAT_LABEL}anthropic-messages": "true"}
    await member_at(stack, "qwen-0", free_port(), labels)
    timed_out = await outcomes(stack, "timed_out")
    status, body, headers = await raw_chat(stack)
    assert status == 503 and headers["Retry-After"] == str(hold.RETRY_AFTER)
    assert body["error"]["code"] == "hold_timeout"
    assert "no member of 'qwen' became ready within 0.5 s" in body["error"]["message"]
    message = {"model": "qwen", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    async with stack.http.post(f"{stack.router_url}/messages", json=message, headers={"anthropic-version": "2023-06-01"}) as response:
        assert response.status == 503 and response.headers["Retry-After"] == str(hold.RETRY_AFTER)
        anthropic = await response.json()
    assert anthropic["type"] == "error" and anthropic["error"]["type"] == "overloaded_error"
    assert "became ready within 0.5 s" in anthropic["error"]["message"]
    assert await outcomes(stack, "timed_out") == timed_out + 2
    assert await held(stack) == 0


async def test_the_request_over_the_bound_is_a_503_at_once_and_those_held_are_answered(stack: Stack) -> None:
    assert stack.router.routes.holds is not None
    stack.router.routes.holds.settings = hold.Settings(hold_max=2, hold_seconds=60)
    port = free_port()
    await member_at(stack, "qwen-0", port, AT_ZERO)
    asked = [asyncio.create_task(raw_chat(stack)) for _ in range(2)]
    await eventually(lambda: _held_is(stack, 2), message="two held")
    status, body, headers = await asyncio.wait_for(raw_chat(stack), 5)  # at once: not after the hold time
    assert status == 503 and headers["Retry-After"] == str(hold.RETRY_AFTER)
    assert body["error"]["code"] == "hold_queue_full" and "2 requests already wait" in body["error"]["message"]
    async with VllmSimulator(["qwen"], port=port):
        answers = await asyncio.wait_for(asyncio.gather(*asked), 20)
    assert [status for status, _, _ in answers] == [200, 200]


async def test_a_client_that_leaves_while_held_leaves_the_queue(stack: Stack) -> None:
    await member_at(stack, "qwen-0", free_port(), AT_ZERO)
    gone = await outcomes(stack, "gone")
    leaving = asyncio.create_task(raw_chat(stack))
    await eventually(lambda: _held_is(stack, 1), message="held")
    leaving.cancel()  # the client hangs up
    with contextlib.suppress(asyncio.CancelledError):
        await leaving
    await eventually(lambda: _held_is(stack, 0), message="out of the queue")
    assert await outcomes(stack, "gone") == gone + 1


async def test_a_router_that_drains_answers_what_it_holds(stack: Stack) -> None:
    await member_at(stack, "qwen-0", free_port(), AT_ZERO)
    serving = await protocol.listen(stack.router.routes, "127.0.0.1", 0)  # a listener of its own, to drain
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hello"}]}
    asked = asyncio.create_task(stack.http.post(f"http://127.0.0.1:{serving.port}/v1/chat/completions", json=body))
    await eventually(lambda: _held_is(stack, 1), message="held")
    cut = await asyncio.wait_for(serving.drain(), 10)  # long before the 30 s drain or the 60 s hold
    async with await asyncio.wait_for(asked, 5) as response:
        assert response.status == 503 and response.headers["Retry-After"] == "1"
        assert (await response.json())["error"]["code"] == "router_stopping"
    assert cut == 0, "answered, not cut off"


async def test_a_member_not_marked_for_zero_is_a_503_at_once_as_before(stack: Stack, bus: Client) -> None:
    demands: list[Demand] = []
    await subscribe(bus, DEMAND_SIGNALS, demands, Demand)
    await member_at(stack, "plain-0", free_port(), {MODEL_DEPLOYMENT: "plain", MODEL_DEPLOYMENT_NAMESPACE: "team-a"}, model="plain")
    status, body, headers = await asyncio.wait_for(raw_chat(stack, model="plain"), 5)
    assert status == 503 and headers["Retry-After"] == "1"
    assert body["error"]["code"] == "upstream_unavailable"
    await bus.flush()
    assert demands == [] and await held(stack, "plain") == 0


async def test_each_member_s_load_is_published_every_probe_tick(nats: NatsEndpoint, tmp_path: Path, bus: Client) -> None:
    loads: list[MemberLoad] = []
    await subscribe(bus, LOAD_SIGNALS, loads, MemberLoad)
    params = SimParams(max_running=2, decode_per_token=0.0005, ttft_base=0.001)
    async with running_stack(nats.url, tmp_path, probe_interval=0.2) as stack, VllmSimulator(["qwen"], params) as sim:
        spec = {"backend": "vllm-openai", "url": sim.url, "models": [{"name": "qwen"}]}
        labels = {MODEL_DEPLOYMENT: "qwen", MODEL_DEPLOYMENT_NAMESPACE: "team-a"}
        doc = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "qwen-0", "labels": labels}}
        assert (await stack.apply({**doc, "spec": spec}))[0] in (200, 201)
        await eventually(lambda: stack.served("qwen"), message="qwen served")
        sim.slow_factor = 1e6  # what reaches it stays in flight until the factor is put back
        asked = [asyncio.create_task(raw_chat(stack)) for _ in range(3)]

        def busy() -> MemberLoad | None:
            return next((m for m in reversed(loads) if m.running == 2 and m.waiting == 1 and m.in_flight == 3), None)

        found = await eventually(busy, message="a MemberLoad with the simulator's gauges and the router's 3 in flight", timeout=15)
        assert found.member == "qwen-0" and found.deployment == "team-a/qwen" and found.models == ("qwen",)
        assert found.healthy and found.router == stack.router.service.router
        assert found.kv is not None and 0 < found.kv <= 1
        sim.slow_factor = 1.0
        assert [status for status, _, _ in await asyncio.wait_for(asyncio.gather(*asked), 20)] == [200] * 3
        idle = await eventually(lambda: next((m for m in reversed(loads) if m.in_flight == 0 and m.running == 0), None), timeout=15)
        assert idle.waiting == 0


async def test_an_engine_without_gauges_reports_none(nats: NatsEndpoint, tmp_path: Path, bus: Client) -> None:
    loads: list[MemberLoad] = []
    await subscribe(bus, LOAD_SIGNALS, loads, MemberLoad)
    upstream = FakeOpenAI(models=["plain"])  # answers /v1/models, and has no /metrics
    await upstream.start()
    try:
        async with running_stack(nats.url, tmp_path, probe_interval=0.2) as stack:
            spec = {"backend": "vllm-openai", "url": upstream.url, "models": [{"name": "plain"}]}
            doc = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "plain-0"}, "spec": spec}
            assert (await stack.apply(doc))[0] in (200, 201)
            found = await eventually(lambda: next((m for m in loads if m.healthy), None), message="a healthy MemberLoad", timeout=15)
    finally:
        await upstream.stop()
    assert (found.member, found.deployment, found.running, found.waiting, found.kv) == ("plain-0", "", None, None, None)
