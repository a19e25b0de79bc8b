"""Entry point: `python -m services.selector` (see runtime/entry.py for the environment it reads)."""

from __future__ import annotations

from runtime.entry import Context
from runtime.service import Runnable
from services.selector.handlers import SelectorService

NAME = "selector"


async def start(context: Context) -> list[Runnable]:
    return [context.scaled(NAME, SelectorService)]
