"""Client keys at the router, end to end: the keys document in the secret store (hashes only), the router over
real HTTP, the official SDKs as clients. And the router's drain on stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from prometheus_client import REGISTRY

from services.router import protocol
from services.router.keyfile import KeyFile
from services.router.keys import ClientKey, Gate, KeyRing, hash_key, new_key
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack, running_stack

ECHO = {
    "apiVersion": "airdress.co/v1alpha1",
    "kind": "InferencePoolMember",
    "metadata": {"name": "echo"},
    "spec": {"backend": "echo", "models": [{"name": "echo"}, {"name": "private"}]},
}


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, probe_interval=0.3) as running:
        await running.apply(ECHO)
        await eventually(lambda: running.served("echo"), message="the echo member is ready")
        yield running


def keep(stack: Stack, *keys: ClientKey) -> KeyFile:
    """Store the keys document (hashes) in the stack's secret store and make the router require keys from it."""
    stack.secrets.set("client-keys", KeyRing(keys).dump())
    keyfile = KeyFile.in_store(stack.secrets)
    keyfile.load()
    stack.router.routes.keys = Gate(lambda: keyfile.ring)
    return keyfile


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_without_a_known_key_every_api_is_401_in_its_own_shape(stack: Stack) -> None:
    alice = new_key()
    keep(stack, ClientKey("alice", hash_key(alice)))
    for headers in ({}, {"Authorization": "Bearer jw-made-up"}, {"Authorization": f"Bearer {alice}x"}):
        async with stack.http.post(
            f"{stack.router_url}/chat/completions", json={"model": "echo", "messages": []}, headers=headers
        ) as response:
            body = await response.json()
        assert response.status == 401 and response.headers["www-authenticate"] == "Bearer"
        assert body["error"]["code"] == "invalid_api_key" and alice not in json.dumps(body)
    async with stack.http.get(f"{stack.router_url}/models") as response:
        assert response.status == 401
    client = anthropic.AsyncAnthropic(base_url=stack.router_url.removesuffix("/v1"), api_key="sk-ant-not-a-jetway-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await client.messages.create(model="echo", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    await client.close()


async def test_a_key_sees_and_uses_only_its_models(stack: Stack) -> None:
    alice = new_key()
    keep(stack, ClientKey("alice", hash_key(alice), models=("echo",)))
    client = openai.AsyncOpenAI(base_url=stack.router_url, api_key=alice, max_retries=0)
    assert [m.id async for m in client.models.list()] == ["echo"], "not the model it may not use"
    answer = await client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hello"}])
    assert answer.choices[0].message.content
    with pytest.raises(openai.NotFoundError) as refused:
        await client.chat.completions.create(model="private", messages=[{"role": "user", "content": "hello"}])
    assert refused.value.code == "model_not_found"
    await client.close()


async def test_over_a_limit_is_429_with_retry_after_and_counted_per_key(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bob, carol = new_key(), new_key()
    keep(stack, ClientKey("bob", hash_key(bob), rpm=2), ClientKey("carol", hash_key(carol), tpm=20))
    ok_before = sample("jetway_router_key_requests_total", {"key": "bob", "status": "200"})
    limited_before = sample("jetway_router_key_requests_total", {"key": "bob", "status": "429"})
    headers = {"Authorization": f"Bearer {bob}"}
    statuses = []
    for _ in range(3):
        async with stack.http.post(
            f"{stack.router_url}/chat/completions", json={"model": "echo", "messages": [{"role": "user", "content": "x"}]}, headers=headers
        ) as response:
            statuses.append(response.status)
            body = await response.json()
            retry_after = response.headers.get("retry-after")
    assert statuses == [200, 200, 429]
    assert retry_after is not None and 1 <= int(retry_after) <= 61
    assert body["error"]["type"] == "rate_limit_error" and body["error"]["code"] == "rate_limit_exceeded"
    assert sample("jetway_router_key_requests_total", {"key": "bob", "status": "200"}) - ok_before == 2
    assert sample("jetway_router_key_requests_total", {"key": "bob", "status": "429"}) - limited_before == 1

    # carol's 20 tokens a minute: a long prompt spends them (estimated, the echo member reports no usage), then 429
    client = openai.AsyncOpenAI(base_url=stack.router_url, api_key=carol, max_retries=0)
    await client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "y" * 200}])
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "y"}])
    await client.close()
    assert bob not in caplog.text and carol not in caplog.text


async def test_a_rotated_keys_document_takes_effect_within_a_tick(stack: Stack) -> None:
    old, new = new_key(), new_key()
    keyfile = keep(stack, ClientKey("old", hash_key(old)))
    watching = asyncio.create_task(keyfile.watch(0.1, stack.router.routes.keys))
    try:
        stack.secrets.set("client-keys", KeyRing((ClientKey("new", hash_key(new)),)).dump())

        async def status(key: str) -> int:
            async with stack.http.get(f"{stack.router_url}/models", headers={"Authorization": f"Bearer {key}"}) as response:
                return response.status

        await eventually(lambda: _is(status(new), 200), message="the new key is accepted")
        assert await status(old) == 401
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching


async def _is(pending: Any, expected: int) -> bool:
    return bool(await pending == expected)


async def held_member(stack: Stack, upstreams: list[FakeOpenAI]) -> FakeOpenAI:
    """A member `slow` whose streams stop after their first event until the test sets `hold`."""
    held = FakeOpenAI(name="held", models=["slow"], hold=asyncio.Event())
    upstreams.append(await held.start())
    spec = {"backend": "vllm-openai", "url": held.url, "models": [{"name": "slow"}]}
    await stack.apply({**ECHO, "metadata": {"name": "held"}, "spec": spec})
    await eventually(lambda: stack.served("slow"), message="ready")
    return held


async def test_drain_lets_a_stream_finish_refuses_new_connections_then_closes(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    held = await held_member(stack, upstreams)
    serving = await protocol.listen(stack.router.routes, "127.0.0.1", 0, limits=protocol.Limits(drain_timeout=30))
    url = f"http://127.0.0.1:{serving.port}/v1/chat/completions"
    body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "one two three"}]}
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as response:
        assert response.status == 200
        await response.content.readuntil(b"\n\n")  # the first event: the stream is in progress, held upstream
        draining = asyncio.create_task(serving.drain())
        await eventually(lambda: serving.listener.draining, message="draining")
        with pytest.raises(aiohttp.ClientConnectionError):
            async with aiohttp.ClientSession() as other, other.get(f"http://127.0.0.1:{serving.port}/v1/models"):
                pass
        assert not draining.done(), "the stream in progress holds the drain"
        held.hold.set()  # type: ignore[union-attr]
        rest = await response.content.read()
    assert rest.endswith(b"data: [DONE]\n\n"), "the stream finished whole"
    assert await asyncio.wait_for(draining, 10) == 0, "nothing was cut off"


async def test_drain_cuts_off_what_outlasts_the_grace(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    await held_member(stack, upstreams)  # never released: the drain runs out first
    serving = await protocol.listen(stack.router.routes, "127.0.0.1", 0, limits=protocol.Limits(drain_timeout=0.2))
    body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "one two"}]}
    async with aiohttp.ClientSession() as http, http.post(f"http://127.0.0.1:{serving.port}/v1/chat/completions", json=body) as response:
        await response.content.readuntil(b"\n\n")
        assert await serving.drain() == 1
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.content.read()
