"""The shared start-up path: dev reload (the Tilt stack restarts a service when its sources change)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from runtime.entry import reload_when_changed, sources_stamp


async def test_a_changed_source_asks_for_a_restart_and_a_stop_does_not(tmp_path: Path) -> None:
    source = tmp_path / "services" / "demo.py"
    source.parent.mkdir()
    source.write_text("x = 1\n")
    stop = asyncio.Event()
    watching = asyncio.create_task(reload_when_changed(stop, tmp_path, interval=0.05, before=sources_stamp(tmp_path)))
    later = source.stat().st_mtime + 5
    source.write_text("x = 2\n")
    os.utime(source, (later, later))
    assert await asyncio.wait_for(watching, 5) is True and stop.is_set()

    quiet = asyncio.Event()
    idle = asyncio.create_task(reload_when_changed(quiet, tmp_path, interval=0.05))
    quiet.set()
    assert await asyncio.wait_for(idle, 5) is False
