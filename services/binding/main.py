"""Entry point: `python -m services.binding` (see runtime/entry.py for the environment it reads).

In a cluster it writes each agent's workload, and re-checks every binding every
JETWAY_RESYNC_SECONDS (30): a Gateway's status can change without anything else changing.
"""

from __future__ import annotations

from runtime.entry import Context
from runtime.kubewriter import KubeWriter
from runtime.service import Runner
from services.binding.handlers import BindingService

NAME = "binding"


async def start(context: Context) -> list[Runner]:
    if context.kube is None:
        return [Runner(BindingService(), context.nc)]
    resync = context.resync_interval
    return [Runner(BindingService(KubeWriter(context.kube), resync_interval=resync), context.nc)]
