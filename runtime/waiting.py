"""Waiting on what a fold makes true: a caller awaits a condition on a projection, and the fold that makes it
hold answers it (no polling). The front door waits for its own write to be folded; standalone start-up waits
for the built-in providers. Pure bookkeeping on the event loop: no I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class FoldWaits:
    """Conditions awaited on a projection; `folded()` after each fold answers those that now hold."""

    def __init__(self) -> None:
        self._waiting: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def folded(self) -> None:
        for holds, future in self._waiting:
            if not future.done() and holds():
                future.set_result(None)

    async def until(self, holds: Callable[[], bool], timeout: float) -> bool:
        """True once `holds()` is true (at once when it already is), False after `timeout` seconds."""
        if holds():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (holds, future)
        self._waiting.append(entry)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting.remove(entry)
