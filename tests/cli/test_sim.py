"""`jetway sim`: the simulator served as a member of a running `jetway up`, reached through the router with the
official openai SDK, and its member deleted again on Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import openai

from testbed.waiting import eventually
from tests.cli.test_up import jetway, stack_dir, start_up  # noqa: F401 (stack_dir is a fixture)
from tests.support.cli import jetway_command


async def test_a_simulated_model_answers_through_the_router_and_its_member_goes_with_it(stack_dir: Path) -> None:  # noqa: F811
    up = await start_up(stack_dir)
    sim = await asyncio.create_subprocess_exec(
        *jetway_command(),
        "sim",
        "--model",
        "Qwen/Qwen3-0.6B",
        "--default-max-tokens",
        "5",
        "--data-dir",
        str(stack_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[str] = []

    async def read() -> None:
        assert sim.stdout is not None
        async for line in sim.stdout:
            lines.append(line.decode().rstrip())

    reader = asyncio.create_task(read())
    closing: list[openai.AsyncOpenAI] = []  # an SDK client left open is closed by the garbage collector, on a later test's loop
    try:
        await eventually(
            lambda: any("Ctrl-C to stop" in line for line in lines) or sim.returncode is not None, timeout=30, message="jetway sim serving"
        )
        assert lines[1] == "jetway sim: InferencePoolMember/sim-qwen-qwen3-0-6b created; Ctrl-C to stop", lines
        client = openai.AsyncOpenAI(base_url=up.config()["router_url"], api_key="unused", max_retries=0)
        closing.append(client)

        async def answered() -> openai.types.chat.ChatCompletion | None:
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model="Qwen/Qwen3-0.6B", messages=[{"role": "user", "content": "hello"}]
                )
            except openai.APIStatusError:
                return None  # not probed Healthy yet
            assert raw.headers["x-jetway-member"] == "sim-qwen-qwen3-0-6b"
            return raw.parse()

        completion = await eventually(answered, timeout=30, message="a chat answered by the simulator")
        assert completion.usage is not None and completion.usage.completion_tokens == 5
        code, out, _ = await jetway(stack_dir, "get", "ipm", "sim-qwen-qwen3-0-6b", "-o", "json")
        assert code == 0 and '"Healthy"' in out

        sim.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(sim.wait(), 30) == 0
        await reader
        assert lines[-1] == "jetway sim: stopped; InferencePoolMember/sim-qwen-qwen3-0-6b deleted"
        code, _, err = await jetway(stack_dir, "get", "ipm", "sim-qwen-qwen3-0-6b")
        assert code == 3 and "not found" in err
    finally:
        for client in closing:
            await client.close()
        if sim.returncode is None:
            sim.kill()
            await sim.wait()
        await up.stop()


async def test_without_a_running_jetway_or_with_a_bad_setting_it_says_so(tmp_path: Path) -> None:
    code, _, err = await jetway(tmp_path / "none", "sim")
    assert code == 5 and err.startswith("error: ") and "jetway up" in err and "Traceback" not in err
    code, _, err = await jetway(tmp_path / "none", "sim", "--slow-factor", "0")
    assert (code, err) == (2, "error: slow_factor must be positive\n")
