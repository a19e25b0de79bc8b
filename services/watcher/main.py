"""Entry point: `python -m services.watcher` (standalone apply API on a given NATS).

Reads JETWAY_NATS_URL, JETWAY_API_HOST/PORT, JETWAY_API_TOKEN. `jetway up` builds the same
objects in one process.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass

from nats.aio.client import Client

from runtime import logs, telemetry
from runtime.bus import connect
from runtime.process import settle_heap
from runtime.service import Runner, RunnerSettings
from services.watcher.handlers import WatcherService


@dataclass
class Watcher:
    service: WatcherService
    runner: Runner


def build(nc: Client, *, allow_link_local: bool = False, settings: RunnerSettings | None = None) -> Watcher:
    service = WatcherService(allow_link_local=allow_link_local)
    runner = Runner(service, nc, settings)
    service.runner = runner
    return Watcher(service, runner)


async def main() -> None:
    from services.watcher import api

    logs.setup(os.environ.get("JETWAY_LOG_LEVEL", "info"))
    telemetry.setup("watcher")
    token = os.environ.get("JETWAY_API_TOKEN", "")
    if not token:
        raise SystemExit("JETWAY_API_TOKEN must be set: the apply API never runs without a token")
    nc = await connect(os.environ.get("JETWAY_NATS_URL", "nats://127.0.0.1:4222"), name="watcher")
    watcher = build(nc, allow_link_local=os.environ.get("JETWAY_ALLOW_LINK_LOCAL") == "true")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, watcher.runner.stop)
    task = asyncio.create_task(watcher.runner.run())
    await watcher.runner.ready.wait()
    settle_heap()
    site, _ = await api.serve(
        api.build_app(watcher.service, token), os.environ.get("JETWAY_API_HOST", "0.0.0.0"), int(os.environ.get("JETWAY_API_PORT", "8081"))
    )
    try:
        await task
    finally:
        await site.cleanup()
        await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
