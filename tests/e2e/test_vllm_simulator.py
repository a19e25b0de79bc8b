"""The vLLM simulator (simulator/vllm.py) through real HTTP: what a router can see of it.

No assertion here is on a measured duration: the cache shows in counters and `x-sim-cached-tokens`,
the queue in /metrics, waited for with `eventually`. A huge slow_factor holds requests in flight
and slow_factor 1 lets them go (a new slow_factor applies to work already in progress).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.vllm import CACHED_HEADER, SimParams, VllmSimulator
from testbed.waiting import eventually, within

ROOT = Path(__file__).resolve().parents[2]
HELD = 1e6  # a slow_factor that keeps every request in flight until it is set back
BLOCK = 64  # characters per cache block, the default: 16 tokens


@pytest.fixture
async def sims() -> AsyncIterator[list[VllmSimulator]]:
    """Simulators a test starts (with `start`); stopped after it."""
    started: list[VllmSimulator] = []
    yield started
    for sim in started:
        await sim.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def start(sims: list[VllmSimulator], models: list[str] | None = None, **params: Any) -> VllmSimulator:
    sim = VllmSimulator(models or ["m"], SimParams(**params))
    await sim.start()
    sims.append(sim)
    return sim


def text(blocks: int, seed: str) -> str:
    """`blocks` full cache blocks of text that no other seed shares."""
    return (seed * BLOCK)[: BLOCK * blocks]


async def complete(http: aiohttp.ClientSession, sim: VllmSimulator, prompt: str, **body: Any) -> tuple[int, dict[str, Any]]:
    """POST /v1/completions; the cached tokens it reports and its body."""
    async with http.post(f"{sim.url}/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 2, **body}) as response:
        assert response.status == 200, await response.text()
        return int(response.headers[CACHED_HEADER]), await response.json()


async def samples(http: aiohttp.ClientSession, sim: VllmSimulator) -> dict[str, float]:
    """Every /metrics sample but histogram buckets, by name."""
    async with http.get(f"{sim.url}/metrics") as response:
        exposition = await response.text()
    return {
        s.name: s.value for family in text_string_to_metric_families(exposition) for s in family.samples if not s.name.endswith("_bucket")
    }


async def test_models_lists_every_served_name(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, ["m1", "alias"], max_model_len=4096)
    async with http.get(f"{sim.url}/v1/models") as response:
        listing = await response.json()
    assert listing["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in listing["data"]] == [("m1", "model", 4096), ("alias", "model", 4096)]


async def test_a_shared_prefix_hits_the_cache(sims: list[VllmSimulator]) -> None:
    sim = await start(sims)
    system = text(10, "You are a careful assistant. ")  # 10 blocks, 160 tokens
    async with openai.AsyncOpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0) as client:

        async def ask(question: str) -> tuple[int, Any]:
            messages: Any = [{"role": "system", "content": system}, {"role": "user", "content": question * 40}]
            raw = await client.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=3)
            return int(raw.headers[CACHED_HEADER]), raw.parse()

        cold, first = await ask("first? ")
        warm, second = await ask("second? ")

    assert (cold, warm) == (0, 160)  # the system prompt's blocks; the questions differ from their first block on
    assert second.usage.prompt_tokens_details.cached_tokens == 160
    assert second.choices[0].finish_reason == "length" and second.usage.completion_tokens == 3
    prompt_tokens = first.usage.prompt_tokens + second.usage.prompt_tokens
    assert (sim.counters.prefix_cache_queries, sim.counters.prefix_cache_hits, sim.counters.prompt_tokens) == (
        prompt_tokens,
        160,
        prompt_tokens,
    )


async def test_cached_prefix_answers_without_touching_the_cache(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims)
    await complete(http, sim, text(3, "abc") + "tail")
    before = sim.stats()
    async with http.post(f"{sim.url}/sim/cached-prefix", json={"prompt": text(3, "abc") + "other tail"}) as response:
        assert await response.json() == {"cached_tokens": 48, "prompt_tokens": 51}
    async with http.post(f"{sim.url}/sim/cached-prefix", json={"messages": [{"role": "user", "content": text(3, "xyz")}]}) as response:
        assert (await response.json())["cached_tokens"] == 0
    assert sim.stats() == before


async def test_a_fully_cached_prompt_still_computes_its_last_block(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims)
    prompt = text(4, "exact")  # exactly 4 blocks: vLLM recomputes the last token, so the last block cannot hit
    await complete(http, sim, prompt)
    assert (await complete(http, sim, prompt))[0] == 48


async def test_the_least_recently_used_blocks_are_evicted(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, cache_blocks=8)
    a, b, c = (text(4, seed) + "?" for seed in ("alpha ", "bravo ", "charlie "))  # 4 full blocks each: 64 tokens
    for prompt in (a, b, a, c):  # a is used again after b, so c pushes b out, not a
        await complete(http, sim, prompt)
    assert sim.stats()["cached_blocks"] == 8
    assert (await complete(http, sim, a))[0] == 64
    assert (await complete(http, sim, b))[0] == 0


async def test_eviction_eats_a_prefix_from_its_tail(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, cache_blocks=6)
    a, b = text(4, "alpha ") + "?", text(4, "bravo ") + "?"
    await complete(http, sim, a)
    await complete(http, sim, b)  # 2 of a's 4 blocks go: its last two, so its first two still hit
    assert (await complete(http, sim, a))[0] == 32


async def test_requests_past_max_running_wait_in_the_queue(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, max_running=2, slow_factor=HELD)
    requests = [asyncio.create_task(complete(http, sim, f"request {i}")) for i in range(5)]

    async def queued() -> bool:
        now = await samples(http, sim)
        return now["vllm:num_requests_running"] == 2 and now["vllm:num_requests_waiting"] == 3 and now["vllm:kv_cache_usage_perc"] > 0

    await eventually(queued, message="2 running, 3 waiting")
    async with http.post(f"{sim.url}/sim/config", json={"slow_factor": 1}) as response:
        assert (await response.json())["slow_factor"] == 1
    answers = await within(asyncio.gather(*requests))
    assert [body["usage"]["completion_tokens"] for _, body in answers] == [2] * 5
    final = await samples(http, sim)
    assert (final["vllm:num_requests_running"], final["vllm:num_requests_waiting"], final["vllm:kv_cache_usage_perc"]) == (0, 0, 0)
    assert sim.counters.requests_finished == 5


async def test_a_bounded_queue_answers_503_when_full(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, max_running=1, max_waiting=1, slow_factor=HELD)
    held = [asyncio.create_task(complete(http, sim, f"request {i}")) for i in range(2)]
    await eventually(lambda: sim.stats()["waiting"] == 1, message="one running, one waiting")
    async with http.post(f"{sim.url}/v1/completions", json={"model": "m", "prompt": "one too many"}) as response:
        assert response.status == 503
        assert (await response.json())["error"]["type"] == "server_error"
    sim.slow_factor = 1
    await within(asyncio.gather(*held))


async def test_a_client_that_hangs_up_frees_its_slot(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, max_running=1, slow_factor=HELD)
    gone = asyncio.create_task(complete(http, sim, "abandoned"))
    await eventually(lambda: sim.stats()["running"] == 1, message="running")
    gone.cancel()
    await eventually(lambda: sim.stats()["running"] == 0, message="slot freed")
    sim.slow_factor = 1
    assert (await complete(http, sim, "next"))[1]["usage"]["completion_tokens"] == 2


async def test_streaming_sends_a_chunk_per_token_then_usage(sims: list[VllmSimulator]) -> None:
    sim = await start(sims)
    async with openai.AsyncOpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "count"}], max_tokens=5, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    tokens, last = chunks[:-1], chunks[-1]
    assert len(tokens) == 5 and all(c.choices[0].delta.content for c in tokens)
    assert tokens[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in tokens] == [None] * 4 + ["length"]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (2, 5, 7)


async def test_a_text_completion_stream_ends_with_done(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims)
    body = {"model": "m", "prompt": "go", "max_tokens": 3, "stream": True}
    async with http.post(f"{sim.url}/v1/completions", json=body) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [e.removeprefix("data: ") for e in (await response.text()).split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["object"] for c in chunks] == ["text_completion"] * 3  # no usage chunk: include_usage was not asked
    assert "".join(c["choices"][0]["text"] for c in chunks) == "tok tok tok "


async def test_an_unknown_model_is_404(sims: list[VllmSimulator]) -> None:
    sim = await start(sims)
    async with openai.AsyncOpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as raised:
            await client.completions.create(model="nope", prompt="hi")
    assert raised.value.response.json()["error"] == {
        "message": "The model `nope` does not exist.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("chat/completions", b"{not json", None),
        ("chat/completions", b'{"model": "m"}', "messages"),
        ("chat/completions", b'{"model": "m", "messages": ["hi"]}', "messages"),
        ("completions", b'{"model": "m", "prompt": [1, 2, 3]}', "prompt"),
        ("completions", b'{"model": "m", "prompt": "hi", "max_tokens": 0}', "max_tokens"),
        ("completions", b'{"model": "m", "prompt": "hi", "max_tokens": 9000}', "prompt"),  # past max_model_len
    ],
)
async def test_a_malformed_body_is_400(
    sims: list[VllmSimulator], http: aiohttp.ClientSession, path: str, body: bytes, param: str | None
) -> None:
    sim = await start(sims)
    async with http.post(f"{sim.url}/v1/{path}", data=body, headers={"Content-Type": "application/json"}) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


async def test_the_api_key_guards_v1_and_metrics(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = VllmSimulator(["m"], api_key="secret")
    await sim.start()
    sims.append(sim)
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        for path in ("/v1/models", "/metrics"):
            async with http.get(sim.url + path, headers=headers) as response:
                assert response.status == 401
        async with http.post(f"{sim.url}/v1/completions", json={"model": "m", "prompt": "hi"}, headers=headers) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "invalid_api_key"
    for path in ("/v1/models", "/metrics"):
        async with http.get(sim.url + path, headers={"Authorization": "Bearer secret"}) as response:
            assert response.status == 200
    async with http.get(f"{sim.url}/health") as response:
        assert response.status == 200


async def test_metrics_parse_as_prometheus_text(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims, ["m1", "alias"])
    await complete(http, sim, text(2, "metrics ") + "!", model="alias")
    async with http.get(f"{sim.url}/metrics") as response:
        families = {f.name: f for f in text_string_to_metric_families(await response.text())}
    assert {name: f.type for name, f in families.items()} == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
    }
    assert {s.labels["model_name"] for f in families.values() for s in f.samples} == {"m1"}  # the engine's name, as vLLM labels
    values = await samples(http, sim)
    assert values["vllm:prompt_tokens_total"] == 33 and values["vllm:generation_tokens_total"] == 2
    assert values["vllm:prefix_cache_queries_total"] == 33 and values["vllm:prefix_cache_hits_total"] == 0
    assert values["vllm:time_to_first_token_seconds_count"] == 1


async def test_legacy_names_report_gpu_cache_usage(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = VllmSimulator(["m"], legacy_names=True)
    await sim.start()
    sims.append(sim)
    names = await samples(http, sim)
    assert "vllm:gpu_cache_usage_perc" in names and "vllm:kv_cache_usage_perc" not in names


async def test_reset_zeroes_the_counters_and_can_empty_the_cache(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims)
    prompt = text(2, "reset ") + "!"
    await complete(http, sim, prompt)
    async with http.post(f"{sim.url}/sim/reset") as response:
        stats = await response.json()
    assert (stats["prompt_tokens"], stats["prefix_cache_queries"], stats["cached_blocks"]) == (0, 0, 2)
    assert (await complete(http, sim, prompt))[0] == 32
    async with http.post(f"{sim.url}/sim/reset", json={"cache": True}) as response:
        assert (await response.json())["cached_blocks"] == 0
    async with http.get(f"{sim.url}/sim/stats") as response:
        assert (await response.json())["prefix_cache_hits"] == 0
    assert (await complete(http, sim, prompt))[0] == 0


async def test_config_refuses_what_cannot_change_at_run_time(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = await start(sims)
    for change in ({"block_chars": 32}, {"slow_factor": 0}, {"slow_factor": "fast"}):
        async with http.post(f"{sim.url}/sim/config", json=change) as response:
            assert response.status == 400, change
    assert sim.slow_factor == 1.0


async def test_stop_ends_requests_in_flight(sims: list[VllmSimulator], http: aiohttp.ClientSession) -> None:
    sim = VllmSimulator(["m"], SimParams(max_running=1, slow_factor=HELD))
    await sim.start()
    held = [asyncio.create_task(complete(http, sim, f"request {i}")) for i in range(3)]
    await eventually(lambda: sim.stats()["waiting"] == 2, message="one running, two waiting")
    await within(sim.stop(), 5)
    for request in held:
        with pytest.raises((aiohttp.ClientError, AssertionError)):
            await within(request, 5)


async def test_the_command_line_serves_until_sigint(http: aiohttp.ClientSession) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "simulator.vllm",
        "--port",
        "0",
        "--model",
        "cli-model",
        "--max-running",
        "3",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        banner = (await within(process.stdout.readline())).decode()
        url = banner.split(" on ")[-1].strip()
        async with http.get(f"{url}/sim/stats") as response:
            stats = await response.json()
        assert stats["models"] == ["cli-model"] and stats["params"]["max_running"] == 3
        process.send_signal(signal.SIGINT)
        assert await within(process.wait()) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_serve_takes_vllms_own_command_line_as_an_engine_image_runs_it(http: aiohttp.ClientSession) -> None:
    # the flags Jetway renders for a Direct vLLM deployment, and one the simulator does not model (accepted, no effect)
    argv = ["serve", "--model", "Qwen/Qwen3-0.6B", "--served-model-name", "qwen", "qwen-alias", "--host", "127.0.0.1", "--port", "0"]
    argv += ["--max-num-seqs", "3", "--max-model-len", "2048", "--no-enable-prefix-caching", "--gpu-memory-utilization", "0.9"]
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "simulator.vllm", *argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        banner = (await within(process.stdout.readline())).decode()
        url = banner.split(" on ")[-1].strip()
        async with http.get(f"{url}/sim/stats") as response:
            stats = await response.json()
        assert stats["models"] == ["qwen", "qwen-alias"]
        assert (stats["params"]["max_running"], stats["params"]["max_model_len"]) == (3, 2048)
        assert stats["params"]["prefix_caching"] is False
        process.send_signal(signal.SIGTERM)
        assert await within(process.wait()) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
