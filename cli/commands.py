"""Subcommands that talk to a running Jetway (registered as later issues add them)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:  # argparse's _SubParsersAction is private
    del sub
