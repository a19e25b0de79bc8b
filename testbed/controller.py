"""Jetway in Kubernetes mode for tests: the real services, each on its own NATS connection (as in
separate pods), against the API emulator or the cluster KUBECONFIG names."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from runtime import settings as tree
from runtime.bus import connect
from runtime.entry import Context
from runtime.kube import Kube, KubeError
from runtime.secrets import FileSecrets
from runtime.service import Runner, RunnerSettings
from services import catalog
from services.router import main as router_main
from services.router import protocol
from services.watcher import main as watcher_main
from services.watcher.cluster import ClusterSync
from testbed.kubeapi import Cluster
from testbed.waiting import eventually

SETTINGS = RunnerSettings(backoff=(0.05, 0.1, 0.2, 0.2, 0.2))
RESYNC = 1.0  # seconds: short, so level-triggered repair is seen within a test
SERVICES = ("watcher", "selector", "storage", "workload", "gateway", "binding")  # "router" too, on request


@dataclass
class Controller:
    nats_url: str
    cluster: Cluster
    namespace: str | None
    resync: float = RESYNC
    services: tuple[str, ...] = SERVICES
    secrets: Path = Path("/nonexistent")
    routes: Any = None
    servers: list[Any] = field(default_factory=list)
    runners: dict[str, Runner] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    connections: dict[str, Client] = field(default_factory=dict)
    kubes: dict[str, Kube] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)  # service → kubeconfig of its own identity (real server)
    hosts: dict[str, str] = field(default_factory=dict)  # service → the API's URL as it reaches it (a proxy in between)

    @property
    def sync(self) -> ClusterSync:
        service: Any = self.runners["watcher"].service
        assert service.cluster is not None
        return service.cluster

    async def _runner(self, name: str, nc: Client, kube: Kube) -> Runner:
        # The watcher and the router are built here, not by their process's start: that takes leases on the watcher's
        # kinds and serves its webhook with a certificate issued into a Secret, and serves the router on its setting's
        # port; the tests watch one namespace (or every one) and serve the router's routes on a free port themselves.
        if name == "watcher":
            return watcher_main.build(nc, settings=SETTINGS, cluster=kube, namespace=self.namespace, resync_interval=self.resync).runner
        if name == "router":
            router = router_main.build(nc, FileSecrets(self.secrets), probe_interval=0.2, settings=SETTINGS)
            self.routes = router.routes
            return router.runner
        # The others as their pods start them (services/catalog.py), one runner each (no replicas); their readiness
        # checks and after-ready work are a pod's /readyz, which no test reads. No registry is reachable from a test:
        # image resolution off.
        settings = tree.Settings(kube=tree.Kube(resync_seconds=self.resync), images=tree.Images(resolution="off"))
        context = Context(nc, kube, settings, replicated=False, runner=SETTINGS)
        [runner] = catalog.runners(await catalog.start(context, (name,)))
        return runner

    async def serve_router(self) -> str:
        """Jetway's router on 127.0.0.1 (the "router" service must be running); its base URL."""
        assert self.routes is not None
        server, port = await protocol.serve(self.routes, "127.0.0.1", 0)
        self.servers.append(server)
        return f"http://127.0.0.1:{port}"

    async def start(self, *names: str) -> None:
        names = names or self.services
        for name in names:
            nc = await connect(self.nats_url, name=name)
            kube = await self.cluster.connect(self.identities.get(name))
            if name in self.hosts:
                kube.api.configuration.host = self.hosts[name]
            runner = await self._runner(name, nc, kube)
            self.connections[name], self.kubes[name], self.runners[name] = nc, kube, runner
            self.tasks[name] = asyncio.create_task(runner.run(), name=name)
        started = [self.runners[n] for n in names]
        await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in started)), 30)
        if "watcher" in names:
            await asyncio.wait_for(self.sync.ready.wait(), 30)

    async def stop(self, *names: str) -> None:
        if not names:
            for server in self.servers:
                server.close()
        for name in names or tuple(self.runners):
            runner = self.runners.pop(name)
            runner.stop()
            task = self.tasks.pop(name)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10)
            await self.connections.pop(name).close()
            await self.kubes.pop(name).close()

    async def restart(self, name: str) -> None:
        await self.stop(name)
        await self.start(name)


@contextlib.asynccontextmanager
async def running_controller(
    nats_url: str,
    cluster: Cluster,
    *,
    resync: float = RESYNC,
    services: tuple[str, ...] = SERVICES,
    secrets: Path | None = None,
    all_namespaces: bool = False,
    clean_up: bool = True,
    hosts: dict[str, str] | None = None,
) -> AsyncIterator[Controller]:
    """On a real server the watcher watches the test's namespace only, unless `all_namespaces` (a test
    whose objects span namespaces: a Gateway in another one). `clean_up=False` leaves the objects behind
    (a benchmark that throws the whole server away after). `hosts`: service → the URL it reaches the API
    at (a `TcpProxy` that cuts it off), else the server's own."""
    await cluster.install_crds()
    namespace = None if cluster.emulator is not None or all_namespaces else cluster.namespace
    controller = Controller(nats_url, cluster, namespace, resync, services, secrets or Path("/nonexistent"))
    controller.hosts.update(hosts or {})
    await controller.start()
    try:
        yield controller
    finally:
        if cluster.real and clean_up:  # let Jetway remove its finalizers before the namespace goes
            with contextlib.suppress(KubeError):
                items, _ = await cluster.kube.list("airunway.ai/v1alpha1", "ModelDeployment", cluster.namespace)
                for item in items:
                    await cluster.kube.delete("airunway.ai/v1alpha1", "ModelDeployment", item["metadata"]["name"], cluster.namespace)

                async def gone() -> bool:
                    left, _ = await cluster.kube.list("airunway.ai/v1alpha1", "ModelDeployment", cluster.namespace)
                    return not left

                await eventually(gone, timeout=60, message="test ModelDeployments removed")
        await controller.stop()
