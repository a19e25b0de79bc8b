"""The shared start-up path: dev reload (the Tilt stack restarts a service when its sources change)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from runtime.entry import reload_when_changed, resync_seconds, sources_stamp
from services.console.main import RECHECK_ENV, recheck_seconds


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


def test_the_resync_interval_is_read_once_and_a_bad_one_is_named() -> None:
    assert resync_seconds({}) == 30.0
    assert resync_seconds({"JETWAY_RESYNC_SECONDS": "2.5"}) == 2.5
    for bad in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match=r"JETWAY_RESYNC_SECONDS must be a positive number of seconds"):
            resync_seconds({"JETWAY_RESYNC_SECONDS": bad})


def test_a_seconds_setting_with_an_upper_bound_names_it() -> None:
    """The console's JETWAY_CONSOLE_RECHECK_SECONDS: how soon a revoked token stops working, at most an hour."""
    assert recheck_seconds({}) == 60.0
    assert recheck_seconds({RECHECK_ENV: "3600"}) == 3600.0
    for bad in ("0", "3601", "", "soon", "inf"):
        with pytest.raises(ValueError, match=rf"^{RECHECK_ENV} must be a positive number of seconds, at most 3600 \(got '{bad}'\)$"):
            recheck_seconds({RECHECK_ENV: bad})
