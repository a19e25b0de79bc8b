"""The one interface through which services put objects into a cluster.

Two implementations: `RecordedWriter` for standalone mode, where the decision event that
lists the objects is the record (`jetway render md/NAME` shows them), and the Kubernetes
writer (server-side apply with a field manager per service, see services/watcher/kube.py).
A service writes first and records its decision after, so a failed write is retried and a
recorded decision means the objects exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from contracts.subjects import Key


class Writer(Protocol):
    cluster: bool

    async def apply(self, owner: Key, objects: Sequence[dict[str, Any]], *, manager: str, deleted: bool = False) -> None: ...

    async def run(self) -> None: ...  # beside the service (its `alongside`): what the writer keeps up to date

    async def delete(self, objects: Sequence[dict[str, Any]], *, manager: str) -> None: ...


class RecordedWriter:
    """Standalone: nothing to write; the event is the record."""

    cluster = False

    async def apply(self, owner: Key, objects: Sequence[dict[str, Any]], *, manager: str, deleted: bool = False) -> None:
        return None

    async def run(self) -> None:
        return None

    async def delete(self, objects: Sequence[dict[str, Any]], *, manager: str) -> None:
        return None
