"""One way to start a service process, whichever service it is (`python -m services.<name>`).

Each service declares what it is once (`Declared`: its name, its start, whether it talks to Kubernetes, the servers
it adds); services/catalog.py lists them. Every setting comes from runtime/settings.py, read once here before
anything starts, so a bad value stops the start naming the variable (docs/settings.md lists them all). The ones
this path uses: NATS (`JETWAY_NATS_*`), `JETWAY_MODE` (`cluster`: talk to Kubernetes), `/healthz`, `/readyz` and
`/metrics` (`JETWAY_HEALTH_*`), dev reload, snapshots, leases and the replica's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from nats.aio.client import Client

from runtime import logs, metrics, settings, telemetry
from runtime.bus import START_PATIENCE, Credentials, connect, redacted
from runtime.kube import Kube
from runtime.leases import LeaseSettings, replica_id
from runtime.process import settle_heap
from runtime.replica import Replica
from runtime.service import Runnable, Runner, RunnerSettings, Service, run_until_stopped
from runtime.settings import Settings

Stop = Callable[[], Awaitable[None]]


@dataclass
class Context:
    """What a service's `start` gets: its connections and a place for what starts once it is ready.

    A process (`run` below) makes one replicated: each partitioned service shares its partitions with its other
    replicas through leases. `jetway up`, the tests and the benchmarks start services side by side in one
    process (services/catalog.py) with `replicated=False`: each is then one plain runner over every partition."""

    nc: Client
    kube: Kube | None  # Kubernetes mode only
    settings: Settings = field(default_factory=Settings)  # the process's, runtime/settings.py
    after_ready: list[Callable[[], Awaitable[Stop]]] = field(default_factory=list)  # servers: start, return their stop
    checks: list[Callable[[], bool]] = field(default_factory=list)  # extra readiness conditions
    before_stop: list[Callable[[], Awaitable[object]]] = field(default_factory=list)  # on SIGTERM, before the services stop
    replicated: bool = True  # False: the only one of its service (in one process with the others): no leases
    runner: RunnerSettings | None = None  # the runners' settings (tests: short backoffs); None: the defaults

    @property
    def resync_interval(self) -> float:
        """How often a cluster service re-asserts what it wrote (JETWAY_RESYNC_SECONDS)."""
        return self.settings.kube.resync_seconds

    @property
    def leases(self) -> LeaseSettings:
        return LeaseSettings.of(self.settings.leases)

    @property
    def replica(self) -> str:
        return replica_id(self.settings.leases)

    @property
    def cluster(self) -> bool:
        return self.kube is not None

    def scaled(self, name: str, make: Callable[[], Service]) -> Replica | Runner:
        """This process's replica of a partitioned service: a shard of `make()` per partition it holds; not
        replicated, one runner of `make()` over every partition."""
        if not self.replicated:
            return Runner(make(), self.nc, self.runner)
        return Replica(name, make, self.nc, self.runner, replica=self.replica, leases=self.leases)


@dataclass(frozen=True)
class Declared:
    """What a service is, said once: `python -m services.<name>` starts it through `main`, and services/catalog.py
    lists every one for whoever else starts them."""

    name: str
    start: Callable[[Context], Awaitable[list[Runnable]]]  # its runners; its servers go into context.after_ready
    uses_kube: bool = True  # False: it never talks to the API server, and its pod mounts no token to connect with
    servers: tuple[str, ...] = ()  # what it serves besides /healthz, /readyz and /metrics, and the settings that place it
    cluster_only: bool = False  # True: a process of it runs only in a cluster (standalone, `jetway up` runs it in-process)


SOURCES = ("contracts", "runtime", "services", "cli")
ROOT = Path(__file__).resolve().parents[1]


def sources_stamp(root: Path) -> tuple[tuple[str, float], ...]:  # (path, mtime) of every source file
    return tuple(sorted((str(p), p.stat().st_mtime) for d in SOURCES for p in (root / d).rglob("*.py") if p.is_file()))


Stamp = tuple[tuple[str, float], ...]


async def reload_when_changed(stop: asyncio.Event, root: Path, interval: float = 1.0, before: Stamp | None = None) -> bool:
    """Dev mode: poll the sources (Tilt syncs them into the container) and ask for a restart on a change."""
    if before is None:
        before = await asyncio.to_thread(sources_stamp, root)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):  # asyncio.timeout: wait_for can lose a cancellation on 3.11
            async with asyncio.timeout(interval):
                await stop.wait()
        if await asyncio.to_thread(sources_stamp, root) != before:
            stop.set()
            return True
    return False


async def serve_health(nc: Client, runners: list[Runnable], checks: list[Callable[[], bool]], host: str, port: int) -> web.AppRunner:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": nc.is_connected}, status=200 if nc.is_connected else 503)

    async def readyz(request: web.Request) -> web.Response:
        waiting = [r.name for r in runners if not r.ready.is_set()]
        ok = nc.is_connected and not waiting and all(check() for check in checks)
        return web.json_response({"ok": ok, "waiting": waiting}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def run(service: Declared) -> None:
    """Read the settings, connect, build the service's runners, serve health, run until SIGTERM, then drain. A
    service that never talks to the API server (`uses_kube=False`, the selector) opens no client."""
    name = service.name
    try:
        config = settings.process()  # read once, here: a bad value stops the start, naming the variable
    except ValueError as exc:
        raise SystemExit(f"{name}: {exc}") from None
    if service.cluster_only and not config.process.cluster:
        raise SystemExit(f"{name}: runs in a cluster only (JETWAY_MODE=cluster); standalone, `jetway up` runs it")
    logs.setup(config.process.log_level)
    telemetry.setup(name)
    url = config.nats.url
    # A pod may start before NATS does (a fresh install: the NATS pods wait for their volumes and a quorum): wait for
    # it, rather than exit after the client's usual 10 s and crash-loop into the same wait (the first real node)
    logging.getLogger("jetway").info("connecting to NATS at %s", redacted(url), extra={"service": name})
    nc = await connect(url, name=name, credentials=Credentials.of(config.nats), connect_timeout=START_PATIENCE)
    kube = None
    if config.process.cluster and service.uses_kube:
        kube = await Kube.connect()
        await kube.discover()
    context = Context(nc, kube, config)
    runners = await service.start(context)
    stop, signalled = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    received: list[str] = []

    def on(sig: signal.Signals) -> None:
        received.append(sig.name)
        signalled.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on, sig)

    async def on_signal() -> None:
        """What must happen while every service still runs (the router's drain), then the stop."""
        await signalled.wait()
        # said, so that a restart's previous log tells a kubelet's stop (a failed probe, a rollout) from an exit
        logging.getLogger("jetway").info("%s received: stopping", received[0], extra={"service": name})
        for hook in context.before_stop:
            with contextlib.suppress(Exception):
                await hook()
        stop.set()

    signals = asyncio.create_task(on_signal())
    health = await serve_health(nc, runners, context.checks, config.process.health_host, config.process.health_port)
    stops: list[Stop] = []

    async def ready() -> None:
        settle_heap()
        for start in context.after_ready:
            stops.append(await start())

    reload = None
    if config.process.dev_reload:
        reload = asyncio.create_task(reload_when_changed(stop, ROOT))
    try:
        await run_until_stopped(runners, stop, ready)
    finally:
        signals.cancel()
        for stop_server in stops:
            with contextlib.suppress(Exception):
                await stop_server()
        await health.cleanup()
        if kube is not None:
            await kube.close()
        await nc.drain()
    if reload is not None and reload.done() and reload.result():
        logging.getLogger("jetway").info("sources changed: restarting", extra={"service": name})
        os.execv(sys.executable, [sys.executable, "-m", f"services.{name}"])


def main(service: Declared) -> None:
    asyncio.run(run(service))
