"""`python -m services.router` as a process, as a pod runs it: its metrics on the health port, and SIGTERM, which
stops new connections and lets a stream in progress finish before the process exits."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from runtime.natsserver import free_port
from testbed.waiting import eventually
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack

ROOT = Path(__file__).resolve().parents[2]


async def test_metrics_on_the_health_port_and_a_drain_on_sigterm(stack: Stack, upstreams: list[FakeOpenAI], tmp_path: Path) -> None:
    held = FakeOpenAI(name="held", models=["slow"], hold=asyncio.Event())
    upstreams.append(await held.start())
    member = {"backend": "vllm-openai", "url": held.url, "models": [{"name": "slow"}]}
    await stack.apply({"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "held"}, "spec": member})
    router_port, health_port = free_port(), free_port()
    env = {
        **os.environ,
        "JETWAY_NATS_URL": stack.nats_url,
        "JETWAY_ROUTER_HOST": "127.0.0.1",
        "JETWAY_ROUTER_PORT": str(router_port),
        "JETWAY_HEALTH_HOST": "127.0.0.1",
        "JETWAY_HEALTH_PORT": str(health_port),
        "JETWAY_SECRETS_DIR": str(tmp_path / "secrets"),
        "JETWAY_PROBE_INTERVAL": "0.3",
        "JETWAY_ROUTER_DRAIN_TIMEOUT": "30",
    }
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.router", cwd=ROOT, env=env)
    router = f"http://127.0.0.1:{router_port}"
    try:
        async with aiohttp.ClientSession() as http:

            async def serving() -> bool:
                try:
                    async with http.get(f"{router}/v1/models") as response:
                        return response.status == 200 and bool((await response.json())["data"])
                except aiohttp.ClientError:
                    return False

            await eventually(serving, message="the router process serves the member", timeout=30)
            body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "one two three"}]}
            async with http.post(f"{router}/v1/chat/completions", json=body) as response:
                assert response.status == 200
                await response.content.readuntil(b"\n\n")  # in progress, held upstream

                async with http.get(f"http://127.0.0.1:{health_port}/metrics") as scraped:
                    text = await scraped.text()
                names = {family.name for family in text_string_to_metric_families(text)}
                assert {"jetway_router_requests", "jetway_router_in_flight", "jetway_events_handled"} <= names

                process.send_signal(signal.SIGTERM)

                async def refused() -> bool:
                    try:
                        async with aiohttp.ClientSession() as other, other.get(f"{router}/v1/models"):
                            return False
                    except aiohttp.ClientConnectionError:
                        return True

                await eventually(refused, message="no new connection while draining")
                assert process.returncode is None, "the stream in progress holds the process"
                held.hold.set()  # type: ignore[union-attr]
                rest = await response.content.read()
            assert rest.endswith(b"data: [DONE]\n\n"), "the stream finished whole"
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
