"""Entry point: `python -m services.workload` (see runtime/entry.py for the environment it reads).

In a cluster it writes each deployment's objects, and re-asserts them every JETWAY_RESYNC_SECONDS (30).
"""

from __future__ import annotations

import os

from runtime.entry import Context
from runtime.kubewriter import KubeWriter
from runtime.service import Runnable
from services.workload import registry, render
from services.workload.handlers import WorkloadService

NAME = "workload"


async def start(context: Context) -> list[Runnable]:
    settings = render.settings(os.environ)  # the providers' settings, e.g. KAITO's AIRUNWAY_KAITO_*
    resolver = registry.from_environment(os.environ, cluster=context.kube is not None)  # JETWAY_IMAGE_RESOLUTION
    kube = context.kube
    if kube is None:
        return [context.scaled(NAME, lambda: WorkloadService(settings=settings, resolver=resolver))]
    resync = context.resync_interval
    return [context.scaled(NAME, lambda: WorkloadService(KubeWriter(kube), resync_interval=resync, settings=settings, resolver=resolver))]
