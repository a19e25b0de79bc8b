"""Building services the same way everywhere: `jetway up`, one-service processes, tests, benchmarks."""

from __future__ import annotations

from collections.abc import Callable

from nats.aio.client import Client

from runtime.service import Runner, RunnerSettings
from runtime.writer import Writer
from services.selector.handlers import SelectorService
from services.storage.handlers import StorageService
from services.workload.handlers import WorkloadService
from services.workload.registry import ImageResolver


def build(
    nc: Client,
    writer: Writer | None = None,
    *,
    settings: RunnerSettings | None = None,
    gateway_available: Callable[[], bool] | None = None,
    resync_interval: float | None = None,
    resolver: ImageResolver | None = None,
) -> list[Runner]:
    """The ModelDeployment pipeline: selector → storage → workload, a runner each.

    `gateway_available` overrides discovery (standalone mode has none: no gateway);
    `resync_interval` makes the writers level-triggered in a cluster; `resolver` resolves Direct vLLM
    image tags to digests (None: image resolution off).
    """
    return [
        Runner(SelectorService(), nc, settings),
        Runner(StorageService(writer, resync_interval=resync_interval), nc, settings),
        Runner(
            WorkloadService(writer, gateway_available=gateway_available, resync_interval=resync_interval, resolver=resolver), nc, settings
        ),
    ]
