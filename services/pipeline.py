"""Building services the same way everywhere: `jetway up`, one-service processes, tests, benchmarks."""

from __future__ import annotations

from collections.abc import Callable

from nats.aio.client import Client

from runtime.service import Runner, RunnerSettings
from runtime.writer import Writer
from services.selector.handlers import SelectorService
from services.storage.handlers import StorageService
from services.workload.handlers import WorkloadService


def build(
    nc: Client,
    writer: Writer | None = None,
    *,
    settings: RunnerSettings | None = None,
    gateway_available: Callable[[], bool] = lambda: False,
) -> list[Runner]:
    """The ModelDeployment pipeline: selector → storage → workload, a runner each."""
    return [
        Runner(SelectorService(), nc, settings),
        Runner(StorageService(writer), nc, settings),
        Runner(WorkloadService(writer, gateway_available=gateway_available), nc, settings),
    ]
