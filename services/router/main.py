"""Entry point: `python -m services.router` (see runtime/entry.py for the common environment).

Its settings, the `router` group of runtime/settings.py (docs/settings.md): where it listens, its limits
(protocol.Limits), its policy and weights (policy.Settings), how it holds requests for a model starting from zero
(hold.Settings), client keys, the probe interval, the secret store, and the dial policy. It talks to no Kubernetes API:
members come from the event stream, their credentials from the mounted secret store. `jetway up` builds the same objects in one process.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, fields
from pathlib import Path

from nats.aio.client import Client

from contracts.subjects import ALL_PARTITIONS
from runtime import settings as tree
from runtime.bus import patiently
from runtime.entry import Context, Declared, Stop
from runtime.leases import Leases, LeaseSettings, replica_id
from runtime.secrets import FileSecrets, SecretSource
from runtime.service import Runnable, Runner, RunnerSettings
from services.router import app, budget, hold, metrics, policy, protocol, records
from services.router.fair import Fair
from services.router.fair import Settings as FairSettings
from services.router.handlers import DEFAULT_PROBE_INTERVAL, RouterService
from services.router.keyfile import KeyFile
from services.router.keys import Gate
from services.router.learn import Learner
from services.router.probe import Prober
from services.router.records import Records
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
    holding: hold.Settings | None = None,
    record_sample: float = 0.0,
) -> Router:
    """The router and its prober. With `leases`, one of several replicas: each routes to every member and probes
    the members of the partitions it holds a lease on (handlers.py)."""
    pool = UpstreamPool(allow_link_local=allow_link_local)
    signals = SignalClient(nc)
    prober = Prober(pool=pool, secrets=secrets, signal=signals)
    name = replica or replica_id()
    service = RouterService(prober, probe_interval=probe_interval, router=name)
    holding = holding or hold.Settings()
    if holding.hold_max > 0:
        service.holds = hold.Holds(service.members, holding, publish=nc.publish, probe=service.probe_model, router=name)
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
        holds=service.holds,
        records=Records(nc, name, sample=record_sample) if record_sample > 0 else None,
    )
    members = service.members
    metrics.RECORDER.in_flight = lambda: [(key.name, t.outstanding) for key, t in list(members.traffic.items())]
    metrics.RECORDER.held = service.holds.counts if service.holds is not None else list
    return Router(service, runner, routes)


async def start(context: Context) -> list[Runnable]:
    config = context.settings.router
    secrets = FileSecrets(Path(config.secrets_dir))
    limits, routing = limits_of(config), routing_of(config)
    router = build(
        context.nc,
        secrets,
        probe_interval=config.probe_interval,
        allow_link_local=context.settings.dial.allow_link_local,
        leases=context.leases,
        replica=context.replica,
        routing=routing,
        holding=holding_of(config),
        record_sample=config.records,
    )
    if router.routes.records is not None:
        js = context.nc.jetstream(timeout=10)
        await patiently(  # a pod may start while its NATS cluster still elects leaders: wait, not exit (runtime/bus.py)
            lambda: records.ensure_stream(js, config.records_max_age, config.records_max_bytes),
            "router: the routing records' stream",
            asyncio.Event(),  # nothing stops a start: a signal here ends the process as it is
        )
    keyfile = None
    if (config.client_keys or ("required" if context.settings.process.cluster else "off")) == "required":
        keyfile = KeyFile(Path(config.client_keys_file))
        keyfile.load()  # before serving: the first request meets the keys
        shared = budget.SharedLimiter(context.nc.jetstream(timeout=budget.LEDGER_TIMEOUT), context.replica or replica_id())
        router.routes.keys = Gate(lambda: keyfile.ring, shared if config.limits == "shared" else None)
    fair_queue(router, config)

    async def serve() -> Stop:
        # what the other replicas route teaches this one (services/router/learn.py): it knows its peers before it serves
        recording = router.routes.records
        learner = None
        if recording is not None:
            routes = router.routes
            learner = routes.learner = Learner(context.nc, recording.subject, router.service.members, routes.memory, routes.settings)
            await learner.listen()
        serving = await protocol.listen(router.routes, config.host, config.port, limits=limits)

        watching = asyncio.create_task(keyfile.watch(router.service.resync_interval or 5.0, router.routes.keys)) if keyfile else None
        gate = router.routes.keys
        limiter = gate.limiter if gate is not None and isinstance(gate.limiter, budget.SharedLimiter) else None
        ticking = asyncio.create_task(limiter.run(gate.ring)) if limiter is not None and gate is not None else None
        publishing = asyncio.create_task(recording.run()) if recording is not None else None
        if learner is not None:  # the recent past, read while it serves
            warming = asyncio.create_task(learner.start(config.warm_seconds))
            sharing = asyncio.create_task(learner.share_load())

        context.before_stop.append(serving.drain)  # on SIGTERM: requests in progress finish while the probes still run
        context.checks.append(lambda: not serving.listener.draining)  # /readyz: no new traffic while draining

        async def stop() -> None:
            if watching is not None:
                watching.cancel()
            if limiter is not None and ticking is not None:
                limiter.stop()
                await asyncio.wait([ticking], timeout=5)
            if learner is not None:
                warming.cancel()
                await learner.stop()
                await asyncio.wait([sharing], timeout=5)
            if recording is not None and publishing is not None:  # after the drain: the last requests' records too
                recording.stop()
                await asyncio.wait([publishing], timeout=5)
            await serving.drain()  # already drained on SIGTERM; this closes what is left (a failure's stop)

        return stop

    context.after_ready.append(serve)
    return [router.runner]


def limits_of(config: tree.Router) -> protocol.Limits:
    """The router's limits from its settings (JETWAY_ROUTER_*_TIMEOUT, JETWAY_ROUTER_MAX_CONNECTIONS)."""
    return protocol.Limits(**{f.name: getattr(config, f.name) for f in fields(protocol.Limits)})


def routing_of(config: tree.Router) -> policy.Settings:
    """Its policy and weights from its settings (JETWAY_ROUTER_POLICY ...)."""
    return policy.Settings(**{f.name: getattr(config, f.name) for f in fields(policy.Settings)})


def holding_of(config: tree.Router) -> hold.Settings:
    """How it holds requests for a model starting from zero (JETWAY_ROUTER_HOLD_MAX, JETWAY_ROUTER_HOLD_SECONDS)."""
    return hold.Settings(**{f.name: getattr(config, f.name) for f in fields(hold.Settings)})


def fair_queue(router: Router, config: tree.Router) -> None:
    """Its fair queue for saturated members, when JETWAY_ROUTER_FAIR_PER_MEMBER is set (JETWAY_ROUTER_FAIR_*: fair.py)."""
    settings = FairSettings(**{f.name: getattr(config, f"fair_{f.name}") for f in fields(FairSettings)})
    if settings.on:
        router.routes.fair = router.service.fair = Fair(router.service.members, settings)  # the service wakes it (handlers.py)
        metrics.RECORDER.queued = router.routes.fair.counts


SERVICE = Declared(NAME, start, uses_kube=False, servers=("the router: JETWAY_ROUTER_HOST, JETWAY_ROUTER_PORT",))
