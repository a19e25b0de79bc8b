"""Entry point: `python -m services.storage` (see runtime/entry.py for the environment it reads).

In a cluster it writes PVCs and download Jobs, and re-asserts them every JETWAY_RESYNC_SECONDS (30).
"""

from __future__ import annotations

from runtime.entry import Context, Declared
from runtime.kubewriter import KubeWriter
from runtime.service import Runnable
from services.storage.handlers import StorageService

NAME = "storage"


async def start(context: Context) -> list[Runnable]:
    kube = context.kube
    if kube is None:
        return [context.scaled(NAME, StorageService)]
    return [context.scaled(NAME, lambda: StorageService(KubeWriter(kube), resync_interval=context.resync_interval))]


SERVICE = Declared(NAME, start)
