"""`jetway up` and the client commands, as a user runs them: real processes, real ports."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.waiting import eventually
from tests.support.cli import jetway_command
from tests.support.openai_upstream import FakeOpenAI

ECHO_EXAMPLE = (Path(__file__).resolve().parents[2] / "examples/echo-member.yaml").read_text()


@dataclass
class Up:
    process: asyncio.subprocess.Process
    data: Path
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def config(self) -> dict[str, str]:
        return dict(json.loads((self.data / "jetway.json").read_text()))

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.process.wait(), 30)
        if self.reader is not None:
            await self.reader
        return int(self.process.returncode or 0)


async def start_up(data: Path, *extra: str) -> Up:
    process = await asyncio.create_subprocess_exec(
        *jetway_command(),
        "up",
        "--data-dir",
        str(data),
        "--api-port",
        "0",
        "--router-port",
        "0",
        *extra,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    up = Up(process, data)

    async def read() -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            up.lines.append(line.decode().rstrip())

    up.reader = asyncio.create_task(read())
    await eventually(lambda: "Ctrl-C to stop" in up.text or process.returncode is not None, timeout=60, message="jetway up started")
    assert process.returncode is None, up.text
    return up


@pytest.fixture
async def stack_dir(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "jetway"


async def jetway(data: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *jetway_command(),
        *args,
        "--data-dir",
        str(data),
        stdin=asyncio.subprocess.PIPE if stdin else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    return int(process.returncode or 0), out.decode(), err.decode()


async def test_up_with_the_demo_routes_a_request_and_stops_cleanly(stack_dir: Path) -> None:
    up = await start_up(stack_dir, "--demo")
    await eventually(
        lambda: "demo: answer from member echo" in up.text or "demo: try it yourself" in up.text, timeout=30, message="the demo answer"
    )
    assert "Hello from the Jetway demo: this text went through the router and came back." in up.text
    config = up.config()
    assert set(config) == {"api_url", "router_url", "token", "nats_url"}
    assert stat.S_IMODE(os.stat(stack_dir / "jetway.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(stack_dir).st_mode) == 0o700
    assert "apply API http://127.0.0.1:" in up.text and "router http://127.0.0.1:" in up.text and "sync_interval always" in up.text
    assert await up.stop() == 0
    assert up.lines[-1] == "jetway up: stopped"
    assert "Traceback" not in up.text


async def test_everything_applied_comes_back_after_a_restart(stack_dir: Path) -> None:
    up = await start_up(stack_dir)
    code, out, err = await jetway(stack_dir, "apply", "-f", "examples/echo-member.yaml", "-f", "examples/vllm-members.yaml")
    assert code == 0, err
    assert out.splitlines() == [
        "✓ InferencePoolMember/echo created",
        "✓ InferencePoolMember/gpu-a created",
        "✓ InferencePoolMember/gpu-b created",
    ]
    assert await up.stop() == 0

    again = await start_up(stack_dir)
    try:
        assert "8 resources rebuilt from the stream (3 applied, 5 built-in provider configs: jetway get ipc)" in again.text
        code, out, _ = await jetway(stack_dir, "get", "ipm")
        assert [line.split()[0] for line in out.splitlines()[1:]] == ["echo", "gpu-a", "gpu-b"]
        router = again.config()["router_url"]

        async def answers() -> bool:
            process = await asyncio.create_subprocess_exec(
                "python3",
                "-c",
                "import json,sys,urllib.request as u; r=u.urlopen(u.Request(sys.argv[1]+'/chat/completions', "
                "data=json.dumps({'model':'echo','messages':[{'role':'user','content':'again'}]}).encode(), "
                "headers={'content-type':'application/json'})); print(json.load(r)['choices'][0]['message']['content'])",
                router,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            out, _ = await process.communicate()
            return out.decode().strip() == "again"

        await eventually(answers, timeout=20, message="the rebuilt echo member routes")
    finally:
        await again.stop()


async def test_client_commands_against_a_running_jetway(stack_dir: Path, tmp_path: Path) -> None:
    echo = ECHO_EXAMPLE
    up = await start_up(stack_dir)
    try:
        many = tmp_path / "many.yaml"
        many.write_text(
            echo
            + "\n---\n"
            + "apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata: {name: bad}\nspec: {backend: triton, models: []}\n"
            "---\napiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata: {name: never}\nspec: {backend: echo, models: []}\n"
        )
        code, out, err = await jetway(stack_dir, "apply", "-f", str(many))
        assert code == 3
        assert out.splitlines() == ["✓ InferencePoolMember/echo created"]
        assert f'error: document #2 from {many}: spec.backend: must be one of vllm-openai, echo (got "triton")' in err
        code, out, _ = await jetway(stack_dir, "get", "ipm", "never")
        assert code == 3 and "not found" in _
        code, out, _ = await jetway(stack_dir, "apply", "-f", "examples/echo-member.yaml", "--dry-run", "-o", "json")
        assert code == 0 and json.loads(out)["applied"][0]["action"] == "unchanged"

        changed = tmp_path / "echo.yaml"
        changed.write_text(echo.replace("contextWindow: 8192", "contextWindow: 4096"))
        code, out, _ = await jetway(stack_dir, "diff", "-f", str(changed))
        assert code == 1 and "-  - contextWindow: 8192" in out and "+  - contextWindow: 4096" in out

        code, out, _ = await jetway(stack_dir, "get", "ipm/echo", "-o", "json")
        shown = json.loads(out)
        assert shown["metadata"]["name"] == "echo" and shown["status"]["phase"] in ("Pending", "Healthy")
        stale = json.loads(out)
        stale["metadata"]["resourceVersion"] = "999"
        code, _, err = await jetway(stack_dir, "apply", "-f", "-", stdin=json.dumps(stale).encode())
        assert code == 6 and "resource_version is stale" in err

        code, out, _ = await jetway(stack_dir, "delete", "ipm", "echo")
        assert (code, out.strip()) == (0, "✓ InferencePoolMember/echo deleted")
        code, out, _ = await jetway(stack_dir, "delete", "ipm/echo")
        assert (code, out.strip()) == (0, "✓ InferencePoolMember/echo noop (not found)")
        code, out, _ = await jetway(stack_dir, "events", "ipm/echo")
        assert [line.split()[2] for line in out.splitlines()[1:]][-1] == "ResourceDeleted.v1"
    finally:
        await up.stop()


async def test_secrets_are_files_the_user_alone_can_read_and_never_logged(stack_dir: Path, tmp_path: Path) -> None:
    token = "sk-live-0123456789-never-print-me"
    upstream = await FakeOpenAI(models=["m"], token=token).start()
    up = await start_up(stack_dir, "--log-level", "debug", "--probe-interval", "0.3")
    try:
        value = tmp_path / "token.txt"
        value.write_text(token + "\n")
        code, out, err = await jetway(stack_dir, "secret", "set", "gpu-token", "--from-file", str(value))
        assert code == 0 and token not in out + err
        assert stat.S_IMODE(os.stat(stack_dir / "secrets" / "gpu-token").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(stack_dir / "secrets").st_mode) == 0o700
        manifest = tmp_path / "m.json"
        manifest.write_text(
            json.dumps(
                {
                    "apiVersion": "airdress.co/v1alpha1",
                    "kind": "InferencePoolMember",
                    "metadata": {"name": "gpu"},
                    "spec": {"backend": "vllm-openai", "url": upstream.url, "authSecretRef": "gpu-token", "models": [{"name": "m"}]},
                }
            )
        )
        assert (await jetway(stack_dir, "apply", "-f", str(manifest)))[0] == 0
        await eventually(lambda: any(r.authorization == f"Bearer {token}" for r in upstream.requests), timeout=20, message="probed")
        upstream.token = "something-else"  # make probes fail: error paths are where secrets leak
        await eventually(lambda: len(upstream.requests) > 4, timeout=20, message="failing probes")
        code, out, _ = await jetway(stack_dir, "get", "ipm", "gpu", "-o", "yaml")
        code_events, events, _ = await jetway(stack_dir, "events", "-o", "json")
        assert code == 0 and code_events == 0
        assert token not in out + events
        assert "gpu-token" in out
        assert (await jetway(stack_dir, "secret", "list"))[1].split() == ["gpu-token"]
        code, _, err = await jetway(stack_dir, "secret", "set", "../escape", "--from-file", str(value))
        assert code == 2 and "secret name" in err
    finally:
        await up.stop()
        await upstream.stop()
    assert token not in up.text
    assert any("jetway.service: service running" in line for line in up.lines), "the services logged (debug level was on)"


async def test_commands_without_a_running_jetway_say_how_to_start_one(tmp_path: Path) -> None:
    code, _, err = await jetway(tmp_path / "nothing", "get", "ipm")
    assert code == 5 and "jetway up" in err and "Traceback" not in err
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "jetway.json").write_text(
        json.dumps({"api_url": "http://127.0.0.1:1", "router_url": "", "token": "t", "nats_url": "nats://127.0.0.1:1"})
    )
    code, _, err = await jetway(tmp_path / "stale", "apply", "-f", "examples/echo-member.yaml")
    assert code == 5 and "cannot reach the apply API" in err


def _refused(url: str) -> bool:
    """Nothing listens at the URL's host and port any more."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()
    except OSError:
        return True
    return False


@pytest.mark.parametrize("keys", ["off", "required"])
@pytest.mark.parametrize("demo", [False, True], ids=["plain", "demo"])
async def test_up_stops_within_ten_seconds_in_every_mode(stack_dir: Path, keys: str, demo: bool) -> None:
    """SIGTERM ends every task `jetway up` started (the client keys' file watcher too): the process exits 0 and
    nothing it served still listens."""
    up = await start_up(stack_dir, "--client-keys", keys, *(["--demo"] if demo else []))
    if demo:
        await eventually(lambda: "demo:" in up.text, timeout=30, message="the demo's outcome")
    config = up.config()
    up.process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(up.process.wait(), 10)
    except TimeoutError:
        up.process.kill()
        await up.process.wait()
        raise AssertionError(f"jetway up --client-keys {keys} did not stop within 10 s of SIGTERM:\n{up.text}") from None
    assert await up.stop() == 0, up.text
    assert up.lines[-1] == "jetway up: stopped"
    assert all(_refused(config[name]) for name in ("api_url", "router_url", "nats_url")), config
    assert "Traceback" not in up.text
