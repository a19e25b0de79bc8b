"""A pytest plugin for a test that hangs: `pytest -p testbed.taskdump ...`, then `kill -USR1 <the worker's pid>`
writes every asyncio task's stack to $JETWAY_TASKDUMP (default /tmp/jetway-tasks.txt). A hung asyncio test
shows only an idle event loop to py-spy; the tasks' own stacks say what each awaits (how the 3.11 wait_for
cancellation that hung tests/e2e/test_replicas.py was found)."""

from __future__ import annotations

import asyncio
import os
import signal
from types import FrameType


def _dump(signum: int, frame: FrameType | None) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # between tests: nothing is awaited
    with open(os.environ.get("JETWAY_TASKDUMP", "/tmp/jetway-tasks.txt"), "a") as out:
        for task in asyncio.all_tasks(loop):
            print(f"--- {task.get_name()}", file=out)
            task.print_stack(file=out)


signal.signal(signal.SIGUSR1, _dump)
