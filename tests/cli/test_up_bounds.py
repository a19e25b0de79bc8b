"""`jetway up` itself, as a user runs it, taking the inputs adversarial testing broke it with
(issue 11, D1-D3 and D5): each is refused with a 4xx at once, and the process stays healthy
and serves the next apply. Before, a 4,000-character namespace closed its NATS connection for
good: a 500 after 5 s, then a 500 for every apply, and /healthz still 200."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.cli.test_up import start_up
from tests.contracts.cases import MD, changed
from tests.e2e.test_input_bounds import ECHO, alias_bomb
from tests.support.cli import jetway_command

BOUND = aiohttp.ClientTimeout(total=5)  # a bound on each answer, not a measurement


async def test_up_refuses_bad_inputs_and_stays_healthy(tmp_path: Path) -> None:
    up = await start_up(tmp_path / "jetway")
    try:
        config = up.config()
        auth = {"Authorization": f"Bearer {config['token']}"}
        router = config["router_url"].removesuffix("/v1")
        async with aiohttp.ClientSession(timeout=BOUND) as http:

            async def apply(body: bytes, content_type: str = "application/json") -> tuple[int, dict[str, str]]:
                headers = {**auth, "Content-Type": content_type}
                async with http.post(f"{config['api_url']}/v1/apply", data=body, headers=headers) as response:
                    return response.status, await response.json()

            status, answer = await apply(json.dumps(changed(MD, {"metadata.namespace": "n" * 4000})).encode())
            assert (status, answer["path"]) == (400, "metadata.namespace"), answer
            status, answer = await apply(alias_bomb(), "application/yaml")
            assert (status, answer["code"]) == (413, "too_large"), answer
            status, answer = await apply(b"[" * 100_000 + b"]" * 100_000)
            assert status == 400 and "levels" in answer["error"], answer
            async with http.post(
                f"{config['router_url']}/chat/completions", data=b'{"model": "echo", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"
            ) as response:
                assert response.status == 400

            status, answer = await apply(json.dumps(ECHO).encode())
            assert status == 201, answer
            for url in (f"{config['api_url']}/healthz", f"{router}/healthz"):
                async with http.get(url) as response:
                    assert response.status == 200, url
    finally:
        code = await up.stop()
    assert code == 0, up.text
    assert "Traceback" not in up.text


@pytest.mark.parametrize("command", [jetway_command(), [sys.executable, "-m", "cli.main"]], ids=["script", "module"])
def test_up_with_a_file_for_its_data_folder_exits_two_saying_so(tmp_path: Path, command: list[str]) -> None:
    taken = tmp_path / "not-a-folder"
    taken.write_text("a file")
    done = subprocess.run([*command, "up", "--data-dir", str(taken)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"cannot use {taken} as the data folder" in done.stderr and "File exists" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr, done.stderr
    assert taken.read_text() == "a file"  # nothing changed
