"""Entry point: `python -m services.gateway` (one service per process, as in a cluster).

Reads JETWAY_NATS_URL, JETWAY_ROUTER_HOST/PORT, JETWAY_PROBE_INTERVAL, JETWAY_SECRETS_DIR,
JETWAY_ALLOW_LINK_LOCAL. `jetway up` builds the same objects in one process.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client

from runtime import logs, telemetry
from runtime.bus import connect
from runtime.process import settle_heap
from runtime.secrets import FileSecrets, SecretSource
from runtime.service import Runner, RunnerSettings
from services.gateway import router
from services.gateway.handlers import DEFAULT_PROBE_INTERVAL, GatewayService
from services.gateway.probe import Prober
from services.gateway.signal import SignalClient
from services.gateway.upstream import UpstreamPool


@dataclass
class Gateway:
    service: GatewayService
    runner: Runner
    routes: router.Routes


def build(
    nc: Client,
    secrets: SecretSource,
    *,
    probe_interval: float = DEFAULT_PROBE_INTERVAL,
    allow_link_local: bool = False,
    settings: RunnerSettings | None = None,
) -> Gateway:
    pool = UpstreamPool(allow_link_local=allow_link_local)
    signals = SignalClient(nc)
    prober = Prober(pool=pool, secrets=secrets, signal=signals)
    service = GatewayService(prober, probe_interval=probe_interval)
    runner = Runner(service, nc, settings)
    service.runner = runner
    routes = router.Routes(
        members=service.members, credentials=prober.credentials, on_failure=service.member_failed, signal=signals, pool=pool
    )
    return Gateway(service, runner, routes)


async def main() -> None:
    logs.setup(os.environ.get("JETWAY_LOG_LEVEL", "info"))
    telemetry.setup("gateway")
    nc = await connect(os.environ.get("JETWAY_NATS_URL", "nats://127.0.0.1:4222"), name="gateway")
    secrets = FileSecrets(Path(os.environ.get("JETWAY_SECRETS_DIR", "/var/run/jetway/secrets")))
    gateway = build(
        nc,
        secrets,
        probe_interval=float(os.environ.get("JETWAY_PROBE_INTERVAL", DEFAULT_PROBE_INTERVAL)),
        allow_link_local=os.environ.get("JETWAY_ALLOW_LINK_LOCAL") == "true",
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, gateway.runner.stop)
    task = asyncio.create_task(gateway.runner.run())
    await gateway.runner.ready.wait()
    settle_heap()
    server, _ = await router.serve(
        gateway.routes, os.environ.get("JETWAY_ROUTER_HOST", "0.0.0.0"), int(os.environ.get("JETWAY_ROUTER_PORT", "8080"))
    )
    try:
        await task
    finally:
        server.close()
        await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
