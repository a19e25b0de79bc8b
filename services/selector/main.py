"""Entry point: `python -m services.selector` (see runtime/entry.py for the environment it reads)."""

from __future__ import annotations

from runtime.entry import Context, Declared
from runtime.service import Runnable
from services.selector.handlers import SelectorService

NAME = "selector"


async def start(context: Context) -> list[Runnable]:
    return [context.scaled(NAME, SelectorService)]


SERVICE = Declared(NAME, start, uses_kube=False)  # NATS only: its pod mounts no token
