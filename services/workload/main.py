"""Entry point: `python -m services.workload` (see runtime/entry.py for the environment it reads).

In a cluster it writes each deployment's objects, and re-asserts them every JETWAY_RESYNC_SECONDS (30).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from runtime.entry import Context, Declared, Stop
from runtime.kube import Kube
from runtime.kubewriter import KubeWriter
from runtime.service import Runnable
from services.workload import registry, render
from services.workload.handlers import WorkloadService
from services.workload.providers import BUILTIN

NAME = "workload"
PROVIDER_API = "airunway.ai/v1alpha1"
log = logging.getLogger("jetway.workload")


async def until_registered(kube: Kube, registered: asyncio.Event, interval: float = 1.0) -> None:
    """Sets `registered` once every built-in InferenceProviderConfig is in the cluster (whichever replica wrote it)."""
    while True:
        with contextlib.suppress(Exception):  # the API server busy or away: the next round asks again
            found = [await kube.get_or_none(PROVIDER_API, "InferenceProviderConfig", name) for name in BUILTIN]
            if all(found):
                registered.set()
                log.info("built-in providers registered: %s", ", ".join(BUILTIN))
                return
        await asyncio.sleep(interval)


def ready_once_registered(context: Context, kube: Kube) -> None:
    """Ready only once the built-in providers are registered: a ModelDeployment naming one is refused by admission
    until its config exists, and the install's `kubectl wait ... Available` then applies one (the first real
    node: "InferenceProviderConfig "vllm" not found" right after a fresh install). Once, at start: a config a
    user deletes later makes no replica unready."""
    registered = asyncio.Event()
    context.checks.append(registered.is_set)

    async def start() -> Stop:
        task = asyncio.create_task(until_registered(kube, registered))

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        return stop

    context.after_ready.append(start)


async def start(context: Context) -> list[Runnable]:
    settings = render.settings(os.environ)  # the providers' settings, e.g. KAITO's AIRUNWAY_KAITO_*
    resolver = registry.configured(context.settings.images, cluster=context.kube is not None)
    kube = context.kube
    if kube is None:
        return [context.scaled(NAME, lambda: WorkloadService(settings=settings, resolver=resolver))]
    resync = context.resync_interval
    ready_once_registered(context, kube)
    return [context.scaled(NAME, lambda: WorkloadService(KubeWriter(kube), resync_interval=resync, settings=settings, resolver=resolver))]


SERVICE = Declared(NAME, start)
