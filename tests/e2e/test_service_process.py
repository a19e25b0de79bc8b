"""A service as a process, as a pod runs it, started before the NATS it needs."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp

from runtime.natsserver import NatsServer, free_port
from testbed.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]


async def test_a_service_started_before_nats_waits_for_it(tmp_path: Path) -> None:
    """A pod of a fresh install starts before its NATS does (the NATS pods wait for their volumes and a quorum): the
    process waits for NATS, past the client's usual 10 s, and runs once it comes, instead of exiting into a
    crash loop (the first real node restarted the routers this way)."""
    port, health_port = free_port(), free_port()
    env = {
        **os.environ,
        "JETWAY_NATS_URL": f"nats://127.0.0.1:{port}",
        "JETWAY_HEALTH_HOST": "127.0.0.1",
        "JETWAY_HEALTH_PORT": str(health_port),
    }
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.selector", cwd=ROOT, env=env)
    server = NatsServer(store_dir=tmp_path / "nats", port=port)
    try:
        await asyncio.sleep(12)  # the scenario: NATS comes up 12 s after the service (not a synchronisation)
        assert process.returncode is None, "the service gave up on NATS"
        await asyncio.to_thread(server.start)

        async def ready() -> bool:
            try:
                async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{health_port}/readyz") as answer:
                    return answer.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(ready, timeout=60, message="the service ready once NATS is up")
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)
        server.stop()


async def test_the_watcher_as_a_process_outside_a_cluster_says_jetway_up_runs_it() -> None:
    """Standalone, the watcher records for the front door in `jetway up`'s process: a lone watcher process has no
    front door, so it stops at once with a sentence (and no traceback) rather than run with nothing to serve."""
    env = {**os.environ, "JETWAY_MODE": "standalone", "JETWAY_NATS_URL": f"nats://127.0.0.1:{free_port()}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.watcher", cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert err.decode().strip() == "watcher: runs in a cluster only (JETWAY_MODE=cluster); standalone, `jetway up` runs it"
