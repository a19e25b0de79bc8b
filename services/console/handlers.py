"""The console service: the front door's own fold of the event stream. It decides nothing and writes nothing:
no key is ever affected, so it never reconciles. It keeps what the pages and `/v1/*` read (projection.py), the
index of event ids the timeline's links follow (events.py), and the probe times the router publishes.

Its listeners are told of each event once it is folded (the pages' live watch), and an apply answered by the
front door waits until the event it recorded is folded here (`folded`), so a client reads its own write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import msgspec

from contracts.events import Envelope
from contracts.router import PROBE_SIGNALS, ProbeSignal
from contracts.subjects import ALL_EVENTS, Key
from runtime.service import Runner, Service
from runtime.waiting import FoldWaits
from services.console.events import EventIndex
from services.console.projection import ConsoleState

NAME = "console"


class ConsoleService(Service):
    name = NAME
    consumes = (ALL_EVENTS,)

    def __init__(self) -> None:
        self.state = ConsoleState()
        self.runner: Runner | None = None
        # event id -> stream sequence of the newest events folded (rebuild included): the timeline's links to causes
        self.index = EventIndex()
        self.listeners: list[Callable[[Envelope], None]] = []  # told of each event once folded (the pages' watch)
        self.last_seq = 0  # the stream sequence of the last event folded
        self._waits = FoldWaits()  # `folded`: the sequences the front door's answers wait for

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)
        self.index.add(envelope)
        self.last_seq = max(self.last_seq, envelope.seq)
        for listener in self.listeners:
            listener(envelope)
        self._waits.folded()

    def affected(self, envelope: Envelope) -> tuple[Key, ...]:
        return ()

    def keys(self) -> list[Key]:
        return []

    async def folded(self, seq: int, timeout: float) -> bool:
        """Wait until the event at stream sequence `seq` (or a later one) is folded; False after `timeout`."""
        return await self._waits.until(lambda: self.last_seq >= seq, timeout)

    async def alongside(self, runner: Runner) -> None:
        """The router's probe times, folded as they come (not events: a member's view shows its last probe)."""
        self.runner = runner
        decoder = msgspec.json.Decoder(ProbeSignal)

        async def probed(msg: Any) -> None:
            with contextlib.suppress(msgspec.DecodeError, ValueError):
                signal = decoder.decode(msg.data)
                self.state.probed(signal.subject, signal.at)

        sub = await runner.nc.subscribe(PROBE_SIGNALS, cb=probed)
        try:
            await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
