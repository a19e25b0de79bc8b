"""Entry point: `python -m services.gateway` (see runtime/entry.py for the common environment).

Also reads JETWAY_ROUTER_HOST/PORT, JETWAY_ROUTER_HEADER_TIMEOUT/BODY_TIMEOUT/IDLE_TIMEOUT/
MAX_CONNECTIONS (router.Limits), JETWAY_PROBE_INTERVAL, JETWAY_SECRETS_DIR,
JETWAY_ALLOW_LINK_LOCAL; in a cluster JETWAY_GATEWAY (namespace/name of the Gateway to use) and
JETWAY_EPP_IMAGE. `jetway up` builds the same objects in one process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client

from contracts.subjects import ALL_PARTITIONS
from runtime.entry import Context, Stop
from runtime.leases import Leases, LeaseSettings
from runtime.secrets import FileSecrets, SecretSource
from runtime.service import Runnable, Runner, RunnerSettings
from services.gateway import router
from services.gateway.control import DEFAULT_EPP_IMAGE
from services.gateway.gatewayapi import GatewayApiService
from services.gateway.handlers import DEFAULT_PROBE_INTERVAL, GatewayService
from services.gateway.probe import Prober
from services.gateway.signal import SignalClient
from services.gateway.upstream import UpstreamPool

NAME = "gateway"


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
    leases: LeaseSettings | None = None,
    replica: str | None = None,
) -> Gateway:
    """The router and its prober. With `leases`, one of several replicas: each routes to every member and probes
    the members of the partitions it holds a lease on (handlers.py)."""
    pool = UpstreamPool(allow_link_local=allow_link_local)
    signals = SignalClient(nc)
    prober = Prober(pool=pool, secrets=secrets, signal=signals)
    service = GatewayService(prober, probe_interval=probe_interval)
    if leases is not None:
        service.leases = Leases(nc.jetstream(timeout=5), NAME, ALL_PARTITIONS, replica=replica, settings=leases, on_gain=service.gained)
    runner = Runner(service, nc, settings, owns=service.owns)
    service.runner = runner
    routes = router.Routes(
        members=service.members, credentials=prober.credentials, on_failure=service.member_failed, signal=signals, pool=pool
    )
    return Gateway(service, runner, routes)


async def start(context: Context) -> list[Runnable]:
    secrets = FileSecrets(Path(context.env("JETWAY_SECRETS_DIR", "/var/run/jetway/secrets")))
    gateway = build(
        context.nc,
        secrets,
        probe_interval=float(context.env("JETWAY_PROBE_INTERVAL", str(DEFAULT_PROBE_INTERVAL))),
        allow_link_local=context.env("JETWAY_ALLOW_LINK_LOCAL") == "true",
        leases=context.leases,
        replica=context.replica,
    )

    try:
        limits = router.Limits.from_env(lambda name: context.env(name) or None)
    except ValueError as exc:  # a bad setting stops the start, naming the variable, without a traceback
        raise SystemExit(f"gateway: {exc}") from None

    async def serve_router() -> Stop:
        server, _ = await router.serve(
            gateway.routes, context.env("JETWAY_ROUTER_HOST", "0.0.0.0"), int(context.env("JETWAY_ROUTER_PORT", "8080")), limits=limits
        )

        async def stop() -> None:
            server.close()

        return stop

    context.after_ready.append(serve_router)
    if context.kube is None:
        return [gateway.runner]
    # Kubernetes mode: the control plane too (InferencePools, HTTPRoutes, status.gateway, router members)
    kube = context.kube
    control = context.scaled(
        "gateway-api",
        lambda: GatewayApiService(
            kube,
            configured_gateway=context.env("JETWAY_GATEWAY") or None,
            epp_image=context.env("JETWAY_EPP_IMAGE", DEFAULT_EPP_IMAGE),
            resync_interval=context.resync_interval,
        ),
    )
    return [gateway.runner, control]
