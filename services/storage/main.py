"""Entry point: `python -m services.storage` (see runtime/entry.py for the environment it reads).

In a cluster it writes PVCs and download Jobs, and re-asserts them every JETWAY_RESYNC_SECONDS (30).
"""

from __future__ import annotations

from runtime.entry import Context
from runtime.kubewriter import KubeWriter
from runtime.service import Runner
from services.storage.handlers import StorageService

NAME = "storage"


async def start(context: Context) -> list[Runner]:
    if context.kube is None:
        return [Runner(StorageService(), context.nc)]
    resync = context.resync_interval
    return [Runner(StorageService(KubeWriter(context.kube), resync_interval=resync), context.nc)]
