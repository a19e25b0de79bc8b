"""Entry point: `python -m services.router` (see runtime/entry.py for the common environment).

Also reads JETWAY_ROUTER_HOST/PORT, JETWAY_ROUTER_HEADER_TIMEOUT/BODY_TIMEOUT/IDLE_TIMEOUT/
MAX_CONNECTIONS/DRAIN_TIMEOUT (protocol.Limits), JETWAY_ROUTER_POLICY and its weights (policy.Settings),
JETWAY_ROUTER_CLIENT_KEYS and JETWAY_CLIENT_KEYS_FILE (services/router/keys.py), JETWAY_PROBE_INTERVAL,
JETWAY_SECRETS_DIR and JETWAY_ALLOW_LINK_LOCAL. It talks to no Kubernetes API:
members come from the event stream, their credentials from the mounted secret store. `jetway up` builds the same objects in one process.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client

from contracts.subjects import ALL_PARTITIONS
from runtime.entry import Context, Stop, cluster_mode
from runtime.leases import Leases, LeaseSettings
from runtime.secrets import FileSecrets, SecretSource
from runtime.service import Runnable, Runner, RunnerSettings
from services.router import app, metrics, policy, protocol
from services.router.handlers import DEFAULT_PROBE_INTERVAL, RouterService
from services.router.keyfile import KeyFile
from services.router.keys import FILE_ENV, MOUNTED_FILE, Gate, client_keys_mode
from services.router.probe import Prober
from services.router.signal import SignalClient
from services.router.upstream import UpstreamPool

NAME = "router"


@dataclass
class Router:
    service: RouterService
    runner: Runner
    routes: app.Routes


def build(
    nc: Client,
    secrets: SecretSource,
    *,
    probe_interval: float = DEFAULT_PROBE_INTERVAL,
    allow_link_local: bool = False,
    settings: RunnerSettings | None = None,
    leases: LeaseSettings | None = None,
    replica: str | None = None,
    routing: policy.Settings | None = None,
) -> Router:
    """The router and its prober. With `leases`, one of several replicas: each routes to every member and probes
    the members of the partitions it holds a lease on (handlers.py)."""
    pool = UpstreamPool(allow_link_local=allow_link_local)
    signals = SignalClient(nc)
    prober = Prober(pool=pool, secrets=secrets, signal=signals)
    service = RouterService(prober, probe_interval=probe_interval)
    if leases is not None:
        service.leases = Leases(nc.jetstream(timeout=5), NAME, ALL_PARTITIONS, replica=replica, settings=leases, on_gain=service.gained)
    runner = Runner(service, nc, settings, owns=service.owns)
    service.runner = runner
    routes = app.Routes(
        members=service.members,
        credentials=prober.credentials,
        on_failure=service.member_failed,
        signal=signals,
        pool=pool,
        settings=routing or policy.Settings(),
    )
    members = service.members
    metrics.RECORDER.in_flight = lambda: [(key.name, t.outstanding) for key, t in list(members.traffic.items())]
    return Router(service, runner, routes)


async def start(context: Context) -> list[Runnable]:
    secrets = FileSecrets(Path(context.env("JETWAY_SECRETS_DIR", "/var/run/jetway/secrets")))
    try:
        limits = protocol.Limits.from_env(lambda name: context.env(name) or None)
        routing = policy.Settings.from_env(lambda name: context.env(name) or None)
    except ValueError as exc:  # a bad setting stops the start, naming the variable, without a traceback
        raise SystemExit(f"router: {exc}") from None
    router = build(
        context.nc,
        secrets,
        probe_interval=float(context.env("JETWAY_PROBE_INTERVAL", str(DEFAULT_PROBE_INTERVAL))),
        allow_link_local=context.env("JETWAY_ALLOW_LINK_LOCAL") == "true",
        leases=context.leases,
        replica=context.replica,
        routing=routing,
    )
    keyfile = None
    if client_keys_mode(lambda name: context.env(name) or None, cluster=cluster_mode()) == "required":
        keyfile = KeyFile(Path(context.env(FILE_ENV) or MOUNTED_FILE))
        keyfile.load()  # before serving: the first request meets the keys
        router.routes.keys = Gate(lambda: keyfile.ring)

    async def serve() -> Stop:
        serving = await protocol.listen(
            router.routes, context.env("JETWAY_ROUTER_HOST", "0.0.0.0"), int(context.env("JETWAY_ROUTER_PORT", "8080")), limits=limits
        )

        watching = asyncio.create_task(keyfile.watch(router.service.resync_interval or 5.0, router.routes.keys)) if keyfile else None

        context.before_stop.append(serving.drain)  # on SIGTERM: requests in progress finish while the probes still run
        context.checks.append(lambda: not serving.listener.draining)  # /readyz: no new traffic while draining

        async def stop() -> None:
            if watching is not None:
                watching.cancel()
            await serving.drain()  # already drained on SIGTERM; this closes what is left (a failure's stop)

        return stop

    context.after_ready.append(serve)
    return [router.runner]
