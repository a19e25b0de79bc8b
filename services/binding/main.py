"""Entry point: `python -m services.binding` (see runtime/entry.py for the environment it reads).

In a cluster it writes each agent's workload, and re-checks every binding every
JETWAY_RESYNC_SECONDS (30): a Gateway's status can change without anything else changing.
"""

from __future__ import annotations

from runtime.entry import Context, Declared
from runtime.kubewriter import KubeWriter
from runtime.service import Runnable
from services.binding.handlers import BindingService

NAME = "binding"


async def start(context: Context) -> list[Runnable]:
    kube = context.kube
    if kube is None:
        return [context.scaled(NAME, BindingService)]
    return [context.scaled(NAME, lambda: BindingService(KubeWriter(kube), resync_interval=context.resync_interval))]


SERVICE = Declared(NAME, start)
