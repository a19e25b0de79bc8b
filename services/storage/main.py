"""Entry point: `python -m services.storage` (one service per process, as in a cluster). Reads JETWAY_NATS_URL."""

from __future__ import annotations

import asyncio
import os
import signal

from runtime import logs, telemetry
from runtime.bus import connect
from runtime.process import settle_heap
from runtime.service import Runner
from services.storage.handlers import StorageService


async def main() -> None:
    logs.setup(os.environ.get("JETWAY_LOG_LEVEL", "info"))
    telemetry.setup("storage")
    nc = await connect(os.environ.get("JETWAY_NATS_URL", "nats://127.0.0.1:4222"), name="storage")
    runner = Runner(StorageService(), nc)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop)
    task = asyncio.create_task(runner.run())
    await runner.ready.wait()
    settle_heap()
    try:
        await task
    finally:
        await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
