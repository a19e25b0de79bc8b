"""`python -m services.router` as a process, as a pod runs it: its metrics on the health port, and SIGTERM, which
stops new connections and lets a stream in progress finish before the process exits. The compute agent as a
program of its own, beside a model server, with no router in its process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime.natsserver import free_port
from testbed.waiting import eventually
from tests.support.cli import jetway_command
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
    logged = tmp_path / "router.log"
    with logged.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.router", cwd=ROOT, env=env, stderr=log_file)
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
        # its log says what stopped it: a restarted pod's previous log tells a kubelet's stop from a crash
        assert "SIGTERM received: stopping" in logged.read_text()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("program", ["module", "jetway"])
async def test_the_compute_agent_is_a_program_of_its_own(stack: Stack, upstreams: list[FakeOpenAI], tmp_path: Path, program: str) -> None:
    local = FakeOpenAI(name="nas", models=["llama"], token="agent-token")
    upstreams.append(await local.start())
    token_file = tmp_path / "agent-token"
    token_file.write_text("agent-token\n")
    flags = ["--name", "nas-compute", "--upstream", local.url, "--token-file", str(token_file)]
    if program == "module":  # the bus from the environment, as a pod beside a model server would set it
        command, env = [sys.executable, "-m", "services.router.computeagent", *flags], {**os.environ, "JETWAY_NATS_URL": stack.nats_url}
    else:
        command, env = [*jetway_command(), "compute-agent", *flags, "--nats", stack.nats_url], dict(os.environ)
    process = await asyncio.create_subprocess_exec(*command, cwd=ROOT, env=env)
    try:
        spec = {
            "backend": "vllm-openai",
            "models": [{"name": "llama"}],
            "transport": "operator-signal",
            "computeOperatorRef": "nas-compute",
        }
        await stack.apply(
            {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "ai-nas-0"}, "spec": spec}
        )
        await eventually(lambda: stack.served("llama"), message="the member served through the agent's process", timeout=30)
        status, body, headers = await stack.chat("llama", "from a process of its own")
        assert status == 200 and body["choices"][0]["message"]["content"] == "nas: from a process of its own"
        assert headers["x-jetway-member"] == "ai-nas-0"
        assert local.requests and all(r.authorization == "Bearer agent-token" for r in local.requests), "the agent's own token"
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
