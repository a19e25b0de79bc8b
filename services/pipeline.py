"""Building services the same way everywhere: `jetway up`, one-service processes, tests, benchmarks."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nats.aio.client import Client

from runtime.service import Runner, RunnerSettings
from runtime.writer import Writer
from services.selector.handlers import SelectorService
from services.storage.handlers import StorageService
from services.workload.handlers import WorkloadService
from services.workload.providers import BUILTIN
from services.workload.registry import ImageResolver


def build(
    nc: Client,
    writer: Writer | None = None,
    *,
    settings: RunnerSettings | None = None,
    gateway_available: Callable[[], bool] | None = None,
    resync_interval: float | None = None,
    resolver: ImageResolver | None = None,
    provider_settings: Mapping[str, str] | None = None,
) -> list[Runner]:
    """The ModelDeployment pipeline: selector → storage → workload, a runner each.

    `gateway_available` overrides discovery (standalone mode has none: no gateway);
    `resync_interval` makes the writers level-triggered in a cluster; `resolver` resolves Direct vLLM
    image tags to digests (None: image resolution off); `provider_settings` are the renderers' settings
    read from the process's environment (`render.settings`: KAITO's AIRUNWAY_KAITO_*), as the
    one-service workload process reads them.
    """
    return [
        Runner(SelectorService(), nc, settings),
        Runner(StorageService(writer, resync_interval=resync_interval), nc, settings),
        Runner(
            WorkloadService(
                writer,
                gateway_available=gateway_available,
                resync_interval=resync_interval,
                settings=provider_settings,
                resolver=resolver,
            ),
            nc,
            settings,
        ),
    ]


async def providers_known(runners: list[Runner], *, timeout: float = 10.0) -> bool:
    """Standalone start-up: whether the selector has folded every built-in provider within `timeout` seconds.

    The workload asks for their registration and the watcher records it, a round trip after every runner is
    ready; a deployment applied before it ends would be chosen among the providers known so far (found: a test
    applying at once got `vllm` where `dynamo` ranks first). `jetway up` and the test stack wait for this before
    taking applies; the selector's fold says when (`SelectorService.knows`). False (go on anyway) when a user's
    own configs stand in the built-ins' place."""
    selector = next(r.service for r in runners if isinstance(r.service, SelectorService))
    return await selector.knows(BUILTIN, timeout)
