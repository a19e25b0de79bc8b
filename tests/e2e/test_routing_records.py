"""Routing records end to end: requests through the router over real HTTP leave records in their stream on real
NATS, never the prompt's text, the session id or the client key; `jetway replay routing` reads them back and
replays them through another policy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import openai

from contracts.routing import ROUTING_STREAM, RoutingRecord, decode_batch
from runtime.bus import connect
from services.router import policy
from services.router import records as router_records
from services.router.keys import ClientKey, Gate, KeyRing, hash_key, new_key
from services.router.records import Records
from simulator.vllm import SimParams, VllmSimulator
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, echo_member, running_stack

BIN = Path(sys.executable).parent
PROMPT = "You are a careful assistant. Answer in one word. " * 4  # several blocks of 64


@contextlib.asynccontextmanager
async def recording(stack: Stack, sample: float = 1.0) -> AsyncIterator[Records]:
    nc = await connect(stack.nats_url, name="router-records")
    await router_records.ensure_stream(nc.jetstream(), 3600.0, 16 << 20)
    records = stack.router.routes.records = Records(nc, "router-0", sample=sample)
    task = asyncio.create_task(records.run())
    try:
        yield records
    finally:
        records.stop()
        await task
        stack.router.routes.records = None
        await nc.close()


async def stored(url: str) -> tuple[list[RoutingRecord], bytes]:
    """Every record in the stream, and the raw bytes of every batch (to look for what must not be there)."""
    nc = await connect(url, name="reader")
    js = nc.jetstream()
    found: list[RoutingRecord] = []
    raw = b""
    try:
        last = (await js.stream_info(ROUTING_STREAM)).state.last_seq
        for seq in range(1, last + 1):
            message = await js.get_msg(ROUTING_STREAM, seq)
            raw += message.data or b""
            found += decode_batch(message.data or b"")
    finally:
        await nc.close()
    return found, raw


async def test_each_routed_request_leaves_a_record_with_its_reasons_and_nothing_secret(nats: NatsEndpoint, tmp_path: Path) -> None:
    secret = new_key()
    sims = [VllmSimulator(["sim"], SimParams(decode_per_token=0.0005, ttft_base=0.001)) for _ in range(2)]
    async with running_stack(nats.url, tmp_path, probe_interval=0.2) as stack:
        for i, sim in enumerate(sims):
            await sim.start()
            member = {"backend": "vllm-openai", "url": sim.url, "models": [{"name": "sim"}]}
            kind = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember"}
            assert (await stack.apply({**kind, "metadata": {"name": f"sim-{i}"}, "spec": member}))[0] == 201

        async def both() -> bool:
            async with stack.http.get(f"{stack.router_url}/models") as response:
                listed = (await response.json())["data"]
            return bool(listed) and len(listed[0].get("members", [])) == 2

        await eventually(both, timeout=20, message="both members ready")
        stack.router.routes.keys = Gate(lambda: KeyRing((ClientKey("team-a", hash_key(secret)),)))
        async with recording(stack) as records:
            client = openai.AsyncOpenAI(base_url=stack.router_url, api_key=secret, max_retries=0)
            began = time.time()
            for turn in range(4):
                stream = await client.chat.completions.create(
                    model="sim",
                    max_tokens=3,
                    stream_options={"include_usage": True},
                    messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": f"question {turn}"}],
                    stream=True,
                    extra_headers={"x-session-id": "conversation-7f3a"},
                )
                async for _ in stream:
                    pass
            plain_sent = time.time()
            await client.chat.completions.create(model="sim", max_tokens=3, messages=[{"role": "user", "content": "no session"}])
            plain_done = time.time()
            await client.close()
            await eventually(lambda: records.published >= 5, message="five records published")
        found, raw = await stored(nats.url)
        for sim in sims:
            await sim.stop()
    assert len(found) == 5 and all(r.model == "sim" and r.status == 200 for r in found)
    first, *turns, plain = found
    assert set(first.candidates) == {"sim-0", "sim-1"} and first.member in first.candidates
    assert first.tokens_in > 0 and first.tokens_out == 3 and plain.tokens_out == 3
    assert first.policy == "prefix-cache" and all(t.reason == "session" and t.member == first.member for t in turns)
    assert first.key == "team-a" and first.router == "router-0" and first.blocks and first.block_chars == 64
    assert first.session is not None and first.session == turns[0].session and plain.session is None
    assert first.ttft is not None and first.elapsed >= first.ttft and plain.ttft is None
    assert turns[0].score == 0.0 and turns[0].prefix > 0.5, "a session's turn: no score, most of its prompt already sent there"
    # arrival times on the wall clock, in order; the client's own time to send is not the router's, so the
    # bounds are the client's clock before it sent and after it had the answer
    assert began - 0.05 <= first.at < turns[0].at < plain.at and plain_sent - 0.05 <= plain.at <= plain_done
    assert first.blocks[:3] == turns[0].blocks[:3], "the same system prompt: the same leading block hashes"
    for never in (secret, "careful assistant", "conversation-7f3a", "question"):
        assert never.encode() not in raw, never


async def test_a_sample_rate_records_that_fraction_of_the_requests_evenly(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path) as stack:
        assert (await stack.apply(echo_member("echo")))[0] == 201
        await eventually(lambda: stack.served("echo"), message="echo ready")
        async with recording(stack, sample=0.25) as records:
            for _ in range(20):
                async with stack.http.post(f"{stack.router_url}/chat/completions", json={"model": "echo", "messages": []}) as response:
                    assert response.status == 200
            await eventually(lambda: records.published >= 5, message="the sampled records published")
        found, _ = await stored(nats.url)
    assert len(found) == 5


async def test_records_follow_a_change_of_the_routers_settings(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path) as stack:
        assert (await stack.apply(echo_member("echo")))[0] == 201
        await eventually(lambda: stack.served("echo"), message="echo ready")
        async with recording(stack) as records:
            for settings in (policy.Settings(), policy.Settings(policy="round-robin", block_chars=16)):
                stack.router.routes.settings = settings
                body = {"model": "echo", "messages": [{"role": "user", "content": "a question of more than sixteen characters"}]}
                async with stack.http.post(f"{stack.router_url}/chat/completions", json=body) as response:
                    assert response.status == 200
            await eventually(lambda: records.published >= 2, message="both records published")
        found, _ = await stored(nats.url)
    assert [(r.policy, r.block_chars, len(r.blocks) > 0) for r in found] == [("prefix-cache", 64, False), ("round-robin", 16, True)]


async def test_jetway_replay_routing_replays_the_records_through_another_policy(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path) as stack:
        for name in ("echo-a", "echo-b"):
            member = echo_member(name)
            member["spec"]["models"] = [{"name": "echo"}]
            assert (await stack.apply(member))[0] == 201
        await eventually(lambda: stack.served("echo"), message="echo ready")
        async with recording(stack) as records:
            for i in range(12):
                body = {"model": "echo", "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": f"q{i}"}]}
                async with stack.http.post(f"{stack.router_url}/chat/completions", json=body) as response:
                    assert response.status == 200
            await eventually(lambda: records.published >= 12, message="records published")

    def jetway(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "jetway"), "replay", "routing", *args], capture_output=True, text=True, timeout=120, check=False)

    done = jetway("--policy", "round-robin", "--nats", nats.url, "-o", "json")
    assert done.returncode == 0, done.stderr
    [replayed] = json.loads(done.stdout)
    assert replayed["model"] == "echo" and replayed["requests"] == 12
    assert replayed["replayed"]["per_member"] == {"echo-a": 6, "echo-b": 6}, "round robin, in turn"
    assert replayed["recorded"]["policy"] == "as recorded" and replayed["replayed"]["reasons"] == {"round-robin": 12}
    text = jetway("--policy", "least-outstanding", "--nats", nats.url, "--members", "3")
    assert text.returncode == 0 and "model echo: 12 requests" in text.stdout and "requests to m2" in text.stdout, text.stdout
    bad = jetway("--policy", "prefix-cache", "--nats", nats.url, "--load-bound", "0.5")
    assert bad.returncode == 2 and bad.stderr.startswith("error: router load bound must be") and "Traceback" not in bad.stderr
    assert jetway("--policy", "fastest", "--nats", nats.url).returncode == 2  # argparse names the choices
