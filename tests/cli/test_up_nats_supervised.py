"""D8 (issue 11): `jetway up` supervises its nats-server child. Killed, it is started again on the same
port and store, the services reconnect and what was applied is still served; a child that will not stay up
stops `jetway up` with exit 1 and the reason, never a process that answers as if healthy."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from testbed.waiting import eventually
from tests.cli.test_up import jetway, start_up


def nats_pid(data: Path) -> int | None:
    """The running nats-server child's pid, from the ports file it writes at start."""
    files = sorted((data / "nats" / "ports").glob("nats-server_*.ports"))
    return int(files[-1].stem.rsplit("_", 1)[1]) if files else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_killed_nats_server_is_started_again_and_everything_works_after(tmp_path: Path) -> None:
    data = tmp_path / "jetway"
    up = await start_up(data)
    try:
        code, _, err = await jetway(data, "apply", "-f", "examples/echo-member.yaml")
        assert code == 0, err
        first = nats_pid(data)
        assert first is not None
        os.kill(first, signal.SIGKILL)

        async def restarted() -> bool:
            pid = nats_pid(data)
            return pid is not None and pid != first and alive(pid)

        await eventually(restarted, timeout=30, message="nats-server started again")
        assert "nats-server exited" in up.text and up.process.returncode is None

        async def applies() -> bool:  # the connection is back: a new apply goes through, the old member is there
            code, out, _ = await jetway(data, "apply", "-f", "examples/vllm-members.yaml")
            return code == 0 and "gpu-a" in out

        await eventually(applies, timeout=30, interval=0.5, message="applies work again")
        code, out, _ = await jetway(data, "get", "ipm")
        assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["echo", "gpu-a", "gpu-b"]
    finally:
        assert await up.stop() == 0, up.text  # and SIGTERM still stops it (within the helper's 30 s bound)
    assert "Traceback" not in up.text


async def test_a_nats_server_that_will_not_stay_up_stops_jetway_up_with_the_reason(tmp_path: Path) -> None:
    data = tmp_path / "jetway"
    up = await start_up(data)
    try:

        async def killed_again() -> bool:
            pid = nats_pid(data)
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
            return up.process.returncode is not None

        await eventually(killed_again, timeout=60, interval=0.2, message="jetway up gave up on nats-server")
        assert await up.stop() == 1  # the exit code, once its last words are read from the pipe
        assert "nats-server exited 4 times within 60s" in up.text, up.text
    finally:
        await up.stop()
    assert "Traceback" not in up.text
