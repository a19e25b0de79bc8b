"""Fair tenants at the router, end to end: a vLLM simulator (simulator/vllm.py) as the member over real HTTP, the
router with client keys and a cap of one request in flight per member, so that the member is saturated and
requests queue (services/router/fair.py). A frozen simulator (slow_factor 1e6) keeps what reaches it in flight
until it is thawed; every step waits on what the router shows (its queue's length), never on the clock. The tests
of tenant labels and of a member that becomes ready call the router with the official `openai` SDK."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from contracts.poolmember import FORMAT_LABEL
from services.router.apis import ANTHROPIC_MESSAGES
from services.router.fair import Fair, Settings
from services.router.keyfile import KeyFile
from services.router.keys import ClientKey, Gate, KeyRing, hash_key, new_key
from simulator.vllm import SimParams, VllmSimulator
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, running_stack

TENANTS = ("heavy", "light")


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, probe_interval=0.2) as running:
        yield running


@pytest.fixture
async def sim(stack: Stack) -> AsyncIterator[VllmSimulator]:
    """One member of the model `sim` (it also takes /v1/messages, for the error shapes), ready."""
    async with VllmSimulator(["sim"], SimParams(ttft_base=0.001, decode_per_token=0.0005)) as simulator:
        spec = {"backend": "vllm-openai", "url": simulator.url, "models": [{"name": "sim"}]}
        labels = {f"{FORMAT_LABEL}{ANTHROPIC_MESSAGES}": "true"}
        doc = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "sim-0", "labels": labels}}
        status, body = await stack.apply({**doc, "spec": spec})
        assert status in (200, 201), body
        await eventually(lambda: stack.served("sim"), message="the member is ready")
        try:
            yield simulator
        finally:
            simulator.slow_factor = 1.0  # what is still in flight ends


def fair(
    stack: Stack, names: tuple[str, ...] = TENANTS, labels: dict[str, str] | None = None, **settings: Any
) -> tuple[Fair, dict[str, str]]:
    """Client keys `names` (with the tenant `labels` give them), and the fair queue with one request in flight per
    member, installed as the router service installs it (services/router/main.py: the routes wait in it, the
    service wakes it)."""
    keys = {name: new_key() for name in names}
    ring = KeyRing(tuple(ClientKey(n, hash_key(k), tenant=(labels or {}).get(n)) for n, k in keys.items()))
    stack.secrets.set("client-keys", ring.dump())
    keyfile = KeyFile.in_store(stack.secrets)
    keyfile.load()
    stack.router.routes.keys = Gate(lambda: keyfile.ring)
    queue = Fair(stack.router.service.members, Settings(**{"per_member": 1, **settings}))
    stack.router.routes.fair = stack.router.service.fair = queue
    return queue, keys


def sdk(stack: Stack, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stack.router_url, api_key=key, max_retries=0, timeout=60)


async def chat(client: openai.AsyncOpenAI, content: str = "hello") -> str:
    answer = await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": content}], max_tokens=2)
    return answer.choices[0].message.content or ""


async def apply_member(stack: Stack, name: str, url: str) -> None:
    doc = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": name}}
    status, body = await stack.apply({**doc, "spec": {"backend": "vllm-openai", "url": url, "models": [{"name": "sim"}]}})
    assert status in (200, 201), body


def queued(queue: Fair) -> int:
    return sum(count for _, count in queue.counts())


async def ask(
    stack: Stack, key: str, content: str = "hello", path: str = "/chat/completions"
) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = {"model": "sim", "messages": [{"role": "user", "content": content}], "max_tokens": 2}
    headers = {"Authorization": f"Bearer {key}"} if path == "/chat/completions" else {"x-api-key": key, "anthropic-version": "2023-06-01"}
    async with stack.http.post(f"{stack.router_url}{path}", json=body, headers=headers) as response:
        return response.status, await response.json(content_type=None), dict(response.headers)


async def test_a_heavy_tenant_s_backlog_does_not_starve_a_light_one(stack: Stack, sim: VllmSimulator) -> None:
    queue, keys = fair(stack)
    sim.slow_factor = 1e6  # the first request stays in flight: the member is saturated
    finished: list[str] = []

    async def one(tenant: str, i: int) -> None:
        status, body, _ = await ask(stack, keys[tenant], f"{tenant} {i} " + "words " * 50)
        assert status == 200, body
        finished.append(f"{tenant}{i}")

    heavy = [asyncio.create_task(one("heavy", 0))]
    await eventually(lambda: sim.stats()["running"] == 1, message="heavy's first request in flight")
    heavy += [asyncio.create_task(one("heavy", i)) for i in range(1, 9)]
    await eventually(lambda: queued(queue) == 8, message="heavy's backlog queued")
    light = [asyncio.create_task(one("light", i)) for i in range(2)]
    await eventually(lambda: queued(queue) == 10, message="light's requests queued behind it")
    sim.slow_factor = 1.0
    await asyncio.wait_for(asyncio.gather(*heavy, *light), 20)
    assert finished[0] == "heavy0"
    assert finished.index("light0") <= 2 and finished.index("light1") <= 4, finished  # not after the 8 queued before them
    assert [f for f in finished if f.startswith("heavy")] == [f"heavy{i}" for i in range(9)], "heavy's own order is kept"
    assert queued(queue) == 0


async def test_a_full_queue_answers_429_for_a_key_s_share_and_503_for_the_model(stack: Stack, sim: VllmSimulator) -> None:
    queue, keys = fair(stack, queue_max=3, tenant_max=2)
    sim.slow_factor = 1e6
    waiting = [asyncio.create_task(ask(stack, keys["heavy"]))]
    await eventually(lambda: sim.stats()["running"] == 1, message="in flight")
    waiting += [asyncio.create_task(ask(stack, keys["heavy"])) for _ in range(2)]
    await eventually(lambda: queued(queue) == 2, message="two queued")
    status, body, headers = await ask(stack, keys["heavy"])
    assert (status, body["error"]["type"], body["error"]["code"], headers["Retry-After"]) == (
        429,
        "rate_limit_error",
        "tenant_queue_full",
        "1",
    )
    assert "'heavy' already has 2 requests waiting" in body["error"]["message"] and keys["heavy"] not in str(body)
    waiting.append(asyncio.create_task(ask(stack, keys["light"])))
    await eventually(lambda: queued(queue) == 3, message="the queue full")
    status, body, headers = await ask(stack, keys["light"])
    assert (status, body["error"]["code"], headers["Retry-After"]) == (503, "fair_queue_full", "1")
    status, body, headers = await ask(stack, keys["light"], path="/messages")  # Anthropic's shape on /v1/messages
    assert (status, body["type"], body["error"]["type"], headers["Retry-After"]) == (503, "error", "overloaded_error", "1")
    assert "JETWAY_ROUTER_FAIR_QUEUE_MAX" in body["error"]["message"]
    sim.slow_factor = 1.0
    assert [status for status, _, _ in await asyncio.wait_for(asyncio.gather(*waiting), 20)] == [200] * 4, "the queued are served"


async def test_a_wait_that_runs_out_is_a_503(stack: Stack, sim: VllmSimulator) -> None:
    queue, keys = fair(stack, seconds=0.3)
    sim.slow_factor = 1e6
    first = asyncio.create_task(ask(stack, keys["heavy"]))
    await eventually(lambda: sim.stats()["running"] == 1, message="in flight")
    status, body, headers = await ask(stack, keys["light"])
    assert (status, body["error"]["code"], headers["Retry-After"]) == (503, "fair_queue_timeout", "1")
    assert "none freed within 0.3 s (JETWAY_ROUTER_FAIR_SECONDS)" in body["error"]["message"]
    assert queued(queue) == 0
    sim.slow_factor = 1.0
    assert (await asyncio.wait_for(first, 20))[0] == 200


async def test_a_client_that_leaves_frees_its_place(stack: Stack, sim: VllmSimulator) -> None:
    queue, keys = fair(stack, queue_max=1)
    sim.slow_factor = 1e6
    first = asyncio.create_task(ask(stack, keys["heavy"]))
    await eventually(lambda: sim.stats()["running"] == 1, message="in flight")
    async with contextlib.AsyncExitStack() as leaving:
        session = await leaving.enter_async_context(aiohttp.ClientSession())
        body = {"model": "sim", "messages": [{"role": "user", "content": "leaving"}], "max_tokens": 2}
        gone = asyncio.create_task(
            session.post(f"{stack.router_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {keys['light']}"})
        )
        await eventually(lambda: queued(queue) == 1, message="queued")
        assert (await ask(stack, keys["heavy"]))[0] == 503, "the queue is full"
        gone.cancel()
    await eventually(lambda: queued(queue) == 0, message="the client that left is out of the queue")
    second = asyncio.create_task(ask(stack, keys["heavy"]))
    await eventually(lambda: queued(queue) == 1, message="its place taken")
    sim.slow_factor = 1.0
    assert [r[0] for r in await asyncio.wait_for(asyncio.gather(first, second), 20)] == [200, 200]
    assert sim.stats()["requests_finished"] == 2, "the request whose client left never reached the member"


async def test_the_keys_of_one_tenant_share_its_share_of_the_queue(stack: Stack, sim: VllmSimulator) -> None:
    queue, keys = fair(stack, ("ci", "notebooks", "ops"), {"ci": "research", "notebooks": "research"}, queue_max=8, tenant_max=2)
    sim.slow_factor = 1e6
    async with sdk(stack, keys["ci"]) as ci, sdk(stack, keys["notebooks"]) as notebooks, sdk(stack, keys["ops"]) as ops:
        waiting = [asyncio.create_task(chat(ops, "in flight"))]
        await eventually(lambda: sim.stats()["running"] == 1, message="in flight")
        waiting += [asyncio.create_task(chat(ci)), asyncio.create_task(chat(notebooks))]
        await eventually(lambda: queued(queue) == 2, message="one request of each of research's keys queued")
        with pytest.raises(openai.RateLimitError) as refused:
            await chat(notebooks)  # its own key has one waiting; its tenant has two, its share
        error = refused.value
        assert (error.status_code, error.code, error.response.headers["retry-after"]) == (429, "tenant_queue_full", "1")
        assert "the tenant 'research' (of the key 'notebooks') already has 2 requests waiting" in str(error.body)
        assert not any(key in str(error.body) for key in keys.values()), "never a key"
        waiting.append(asyncio.create_task(chat(ops)))  # another tenant still has its own share
        await eventually(lambda: queued(queue) == 3, message="ops queued beside research")
        sim.slow_factor = 1.0
        assert len(await asyncio.wait_for(asyncio.gather(*waiting), 30)) == 4, "the queued are served"
    assert queued(queue) == 0


async def test_a_queued_request_goes_to_a_member_that_becomes_ready(stack: Stack, sim: VllmSimulator) -> None:
    """Queued while the one member is saturated (its request frozen: no slot will free on it), a request is served as
    soon as a second member is applied and probed Healthy: the fair queue is woken by the member's health, not only by
    a request's end. Without that it would wait out JETWAY_ROUTER_FAIR_SECONDS (60 s here) and get a 503."""
    queue, keys = fair(stack, seconds=60)
    sim.slow_factor = 1e6
    async with (
        sdk(stack, keys["heavy"]) as heavy,
        sdk(stack, keys["light"]) as light,
        VllmSimulator(["sim"], SimParams(ttft_base=0.001, decode_per_token=0.0005)) as second,
    ):
        first = asyncio.create_task(chat(heavy, "frozen"))
        await eventually(lambda: sim.stats()["running"] == 1, message="the only member saturated")
        waiting = asyncio.create_task(chat(light, "waiting"))
        await eventually(lambda: queued(queue) == 1, message="the request queued")
        await apply_member(stack, "sim-1", second.url)
        await asyncio.wait_for(waiting, 15)  # served once sim-1 is probed Healthy, the first member's request still frozen
        assert second.stats()["requests_finished"] == 1 and sim.stats()["running"] == 1 and not first.done()
        assert queued(queue) == 0
        sim.slow_factor = 1.0
        await asyncio.wait_for(first, 30)
