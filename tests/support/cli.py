"""Running the real `jetway` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def jetway_command() -> list[str]:
    script = Path(sys.executable).parent / "jetway"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]


def run_jetway(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*jetway_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd or ROOT,
    )
