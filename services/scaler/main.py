"""Entry point: `python -m services.scaler` (see runtime/entry.py for the environment it reads).

It talks to NATS only: the router's load signals in, its decisions out; the workload service renders them. Its
decisions are applied in a cluster (`JETWAY_MODE=cluster`), where Jetway owns the engines; standalone they are
recommendations (docs/autoscaling.md).
"""

from __future__ import annotations

from runtime.entry import Context, Declared
from runtime.service import Runnable
from services.scaler.handlers import ScalerService

NAME = "scaler"


async def start(context: Context) -> list[Runnable]:
    # the process's mode, not `context.kube`: a NATS-only service has no Kubernetes client in a cluster either
    applied = context.settings.process.cluster
    tuned = context.settings.scaler
    return [context.scaled(NAME, lambda: ScalerService(applied=applied, tick=tuned.tick, stale_after=tuned.stale))]


SERVICE = Declared(NAME, start, uses_kube=False)  # NATS only: its pod mounts no token
