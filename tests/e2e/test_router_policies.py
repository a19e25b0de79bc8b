"""Routing by what members report and what they hold: the router in front of vLLM simulators
(simulator/vllm.py) over real HTTP, real NATS. Nothing here times anything: what the policies
decide is read from `x-jetway-member`, `x-jetway-route`, the simulators' cache counters and the events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts.router import MemberHealthChanged
from contracts.subjects import Key
from runtime.bus import connect
from runtime.eventstore import EventStore
from services.router import policy
from simulator.vllm import SimParams, VllmSimulator
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, running_stack

SYSTEMS = ["You are a careful assistant for team " + name + ". " + ("Context line about the project. " * 40) for name in "ABCD"]


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, probe_interval=0.2) as running:
        yield running


@contextlib.asynccontextmanager
async def simulators(stack: Stack, count: int, params: SimParams | None = None) -> AsyncIterator[list[VllmSimulator]]:
    sims = [VllmSimulator(["sim"], params or SimParams(decode_per_token=0.0005, ttft_base=0.001)) for _ in range(count)]
    for i, sim in enumerate(sims):
        await sim.start()
        member = {"backend": "vllm-openai", "url": sim.url, "models": [{"name": "sim"}]}
        await stack.apply(
            {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": f"sim-{i}"}, "spec": member}
        )
    try:
        await eventually(lambda: members_serving(stack, count), message=f"{count} members ready", timeout=20)
        yield sims
    finally:
        for sim in sims:
            await sim.stop()


async def members_serving(stack: Stack, count: int) -> bool:
    async with stack.http.get(f"{stack.router_url}/models") as response:
        listed = (await response.json())["data"]
    return bool(listed) and len(listed[0]["members"]) == count


async def chat(stack: Stack, messages: list[dict[str, str]], headers: dict[str, str] | None = None, **extra: Any) -> tuple[str, str]:
    body = {"model": "sim", "messages": messages, "max_tokens": 2, **extra}
    async with stack.http.post(f"{stack.router_url}/chat/completions", json=body, headers=headers or {}) as response:
        assert response.status == 200, await response.text()
        await response.read()
        return response.headers["x-jetway-member"], response.headers["x-jetway-route"]


def conversation(system: str, turns: int) -> list[list[dict[str, str]]]:
    """Each turn's messages: the last turn's, its answer, and a new question."""
    steps: list[list[dict[str, str]]] = []
    messages = [{"role": "system", "content": system}]
    for turn in range(turns):
        messages = [*messages, {"role": "user", "content": f"question {turn}: " + "details " * 30}]
        steps.append(messages)
        messages = [*messages, {"role": "assistant", "content": f"answer {turn}"}]
    return steps


async def test_a_conversation_stays_on_the_member_holding_its_prefix(stack: Stack) -> None:
    async with simulators(stack, 4) as sims:
        chosen: dict[str, set[str]] = {}
        for system in SYSTEMS:
            for i, messages in enumerate(conversation(system, 4)):
                member, route = await chat(stack, messages)
                chosen.setdefault(system, set()).add(member)
                if i:
                    assert route.startswith("prefix-cache; reason=prefix;"), route
        assert all(len(members) == 1 for members in chosen.values()), "every turn of a conversation went where its prefix was"
        hits = sum(s.counters.prefix_cache_hits for s in sims)
        queries = sum(s.counters.prefix_cache_queries for s in sims)
        assert hits / queries > 0.6, "the members' own caches served most of the prompts"


async def test_new_prefixes_spread_by_their_hash(stack: Stack) -> None:
    async with simulators(stack, 4):
        homes = [(await chat(stack, [{"role": "system", "content": f"{i}: " + SYSTEMS[0]}]))[0] for i in range(16)]
        assert len(set(homes)) >= 3, homes  # deterministic: CRC-32 of each prompt's first block picks the member


async def test_round_robin_scatters_the_same_conversation(stack: Stack) -> None:
    stack.router.routes.settings = policy.Settings(policy="round-robin")
    async with simulators(stack, 4):
        members = {(await chat(stack, messages))[0] for messages in conversation(SYSTEMS[0], 4)}
        assert len(members) == 4


async def test_a_session_keeps_its_member_under_any_policy(stack: Stack) -> None:
    stack.router.routes.settings = policy.Settings(policy="least-outstanding")
    async with simulators(stack, 3):
        for session in ("s-1", "s-2"):
            seen = [await chat(stack, [{"role": "user", "content": f"hello {i}"}], {"x-session-id": session}) for i in range(4)]
            assert len({member for member, _ in seen}) == 1, session
            assert all(route.startswith("least-outstanding; reason=session;") for _, route in seen[1:])
        by_user = {(await chat(stack, [{"role": "user", "content": f"hi {i}"}], user="alice"))[0] for i in range(3)}
        assert len(by_user) == 1, "the OpenAI `user` field keeps a session too"


async def test_a_member_reporting_a_full_queue_is_saturated_avoided_then_relieved(stack: Stack) -> None:
    params = SimParams(max_running=1, decode_per_token=0.0005, ttft_base=0.001)
    async with simulators(stack, 2, params) as sims, aiohttp.ClientSession() as direct:
        busy = sims[0]
        busy.slow_factor = 1e6  # what reaches it now stays in flight until the factor is put back
        body = {"model": "sim", "messages": [{"role": "user", "content": "hold"}], "max_tokens": 1}
        held = [asyncio.create_task(direct.post(f"{busy.url}/v1/chat/completions", json=body)) for _ in range(18)]

        async def saturated() -> bool:
            found = await stack.condition("sim-0", "Saturated")
            return bool(found and found["status"] == "True" and found["reason"] == "QueueOrKVCacheFull")

        await eventually(saturated, message="sim-0 saturated", timeout=15)
        routed = {(await chat(stack, [{"role": "user", "content": f"q{i}"}]))[0] for i in range(6)}
        assert routed == {"sim-1"}, "a saturated member gets nothing while another has room"
        busy.slow_factor = 1.0
        for response in await asyncio.gather(*held):
            response.release()

        async def relieved() -> bool:
            found = await stack.condition("sim-0", "Saturated")
            return bool(found and found["status"] == "False")

        await eventually(relieved, message="sim-0 relieved", timeout=15)
        nc = await connect(stack.nats_url, name="check")
        items = await EventStore(nc, producer="t").history(Key("InferencePoolMember", "", "sim-0"))
        await nc.close()
        health = [i.event for i in items if isinstance(i.event, MemberHealthChanged)]
        assert [h.saturated for h in health][-3:] == [False, True, False], "recorded when it flipped, not once a tick"
        assert len(health) <= 4, [h.describe() for h in health]
