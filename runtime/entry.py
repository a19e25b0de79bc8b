"""One way to start a service process, whichever service it is (`python -m services.<name>`).

Reads the environment the manifests in `deploy/` set:
- `JETWAY_NATS_URL` (default nats://127.0.0.1:4222), `JETWAY_LOG_LEVEL`;
- `JETWAY_NATS_USER` and `JETWAY_NATS_PASSWORD`: the service's own NATS user (deploy/ sets them from
  the Secret `jetway-nats-users`; contracts/natsauth.py states what each user may do);
- `JETWAY_MODE`: `standalone` (default) or `cluster`, where the process talks to Kubernetes
  (in-cluster service account, else `$KUBECONFIG`);
- `JETWAY_HEALTH_PORT` (default 8090): `/healthz` (the process and its NATS connection are
  alive), `/readyz` (every service rebuilt its state and the extra checks pass) and `/metrics`
  (Prometheus, runtime/metrics.py and docs/metrics.md);
- `JETWAY_DEV_RELOAD=true` (the Tilt stack): when a source file changes, drain and start again;
- `JETWAY_SNAPSHOTS` (`on`/`off`), `JETWAY_SNAPSHOT_EVERY_EVENTS` (10000), `JETWAY_SNAPSHOT_EVERY_SECONDS`
  (300): when each runner stores a snapshot of its projection (runtime/snapshots.py), read once at start;
- `JETWAY_REPLICA` (default: the host name, a pod's name) and `JETWAY_LEASE_TTL_SECONDS` (10): this process is
  one replica of its service, holding a share of the partitions through leases (runtime/leases.py); any
  number of replicas may run, and one that dies gives its share up within the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from nats.aio.client import Client

from runtime import logs, metrics, telemetry
from runtime.bus import START_PATIENCE, Credentials, connect, redacted, streams_from_env
from runtime.kube import Kube
from runtime.leases import LeaseSettings, replica_id
from runtime.process import settle_heap
from runtime.replica import Replica
from runtime.service import Runnable, Service, run_until_stopped
from runtime.snapshots import settings_from_env

Stop = Callable[[], Awaitable[None]]


@dataclass
class Context:
    """What a service's `build` gets: its connections and a place for what starts once it is ready."""

    nc: Client
    kube: Kube | None  # Kubernetes mode only
    resync_interval: float = 30.0  # JETWAY_RESYNC_SECONDS: how often a cluster service re-asserts what it wrote
    leases: LeaseSettings = field(default_factory=LeaseSettings)  # JETWAY_LEASE_TTL_SECONDS
    replica: str = field(default_factory=replica_id)  # JETWAY_REPLICA, else the host name
    after_ready: list[Callable[[], Awaitable[Stop]]] = field(default_factory=list)  # servers: start, return their stop
    checks: list[Callable[[], bool]] = field(default_factory=list)  # extra readiness conditions
    before_stop: list[Callable[[], Awaitable[object]]] = field(default_factory=list)  # on SIGTERM, before the services stop

    @property
    def cluster(self) -> bool:
        return self.kube is not None

    def scaled(self, name: str, make: Callable[[], Service]) -> Replica:
        """This process's replica of a partitioned service: a shard of `make()` per partition it holds."""
        return Replica(name, make, self.nc, replica=self.replica, leases=self.leases)

    @staticmethod
    def env(name: str, default: str = "") -> str:
        return os.environ.get(name, default)


def seconds_setting(environ: Mapping[str, str], name: str, default: float, *, most: float = math.inf) -> float:
    """`name` from the environment, `default` when unset: a finite number of seconds above 0 and at most `most`."""
    text = environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (0 < value <= most and math.isfinite(value)):
        bound = f", at most {most:g}" if math.isfinite(most) else ""
        raise ValueError(f"{name} must be a positive number of seconds{bound} (got {text!r})")
    return value


def resync_seconds(environ: Mapping[str, str]) -> float:
    """JETWAY_RESYNC_SECONDS (30), a positive number of seconds."""
    return seconds_setting(environ, "JETWAY_RESYNC_SECONDS", 30.0)


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
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if await asyncio.to_thread(sources_stamp, root) != before:
            stop.set()
            return True
    return False


def cluster_mode() -> bool:
    return os.environ.get("JETWAY_MODE", "standalone") == "cluster"


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


async def run(name: str, build: Callable[[Context], Awaitable[list[Runnable]]], *, uses_kube: bool = True) -> None:
    """Connect, build the service's runners, serve health, run until SIGTERM, then drain. A service that
    never talks to the API server (`uses_kube=False`, the selector) opens no client: its pod mounts no
    token, so connecting would fail."""
    logs.setup(os.environ.get("JETWAY_LOG_LEVEL", "info"))
    telemetry.setup(name)
    try:
        settings_from_env()  # read once, here: a bad value stops the start, naming the variable
        streams_from_env()
        resync = resync_seconds(os.environ)
        leases = LeaseSettings.from_env(os.environ)
    except ValueError as exc:
        raise SystemExit(f"{name}: {exc}") from None
    url = os.environ.get("JETWAY_NATS_URL", "nats://127.0.0.1:4222")
    # A pod may start before NATS does (a fresh install: the NATS pods wait for their volumes and a quorum): wait for
    # it, rather than exit after the client's usual 10 s and crash-loop into the same wait (the first real node)
    logging.getLogger("jetway").info("connecting to NATS at %s", redacted(url), extra={"service": name})
    nc = await connect(url, name=name, credentials=Credentials.from_env(), connect_timeout=START_PATIENCE)
    kube = None
    if cluster_mode() and uses_kube:
        kube = await Kube.connect()
        await kube.discover()
    context = Context(nc, kube, resync_interval=resync, leases=leases)
    runners = await build(context)
    stop, signalled = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled.set)

    async def on_signal() -> None:
        """What must happen while every service still runs (the router's drain), then the stop."""
        await signalled.wait()
        for hook in context.before_stop:
            with contextlib.suppress(Exception):
                await hook()
        stop.set()

    signals = asyncio.create_task(on_signal())
    health = await serve_health(
        nc, runners, context.checks, os.environ.get("JETWAY_HEALTH_HOST", "0.0.0.0"), int(os.environ.get("JETWAY_HEALTH_PORT", "8090"))
    )
    stops: list[Stop] = []

    async def ready() -> None:
        settle_heap()
        for start in context.after_ready:
            stops.append(await start())

    reload = None
    if os.environ.get("JETWAY_DEV_RELOAD") == "true":
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


def main(name: str, build: Callable[[Context], Awaitable[list[Runnable]]], *, uses_kube: bool = True) -> None:
    asyncio.run(run(name, build, uses_kube=uses_kube))
