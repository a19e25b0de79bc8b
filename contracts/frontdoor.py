"""What the front door (the apply API, services/console/api.py) asks of the service that records manifests
(the watcher), and what it gets back: the narrow interface between the two, so neither imports the other.

A `Recorder` judges a manifest (contracts/admission.py `judge`) against what it stored and appends it, or says
why not; it deletes by key. Everything else the front door shows it reads from its own fold of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from contracts.problems import Problem
from contracts.subjects import Key

Action = Literal["created", "configured", "unchanged", "would_create", "would_update"]


@dataclass(frozen=True)
class Applied:
    key: Key
    action: Action
    generation: int
    previous_generation: int | None
    resource_version: int  # the spec facet's sequence once applied (unchanged: the one it already had)
    warnings: list[str] = field(default_factory=list)
    written: int = 0  # the sequence of the last event this apply appended (the spec, or the status it reported); 0: none


@dataclass(frozen=True)
class Refused:
    """400 (the manifest's problems), 409 (a stale or contended resourceVersion) or 413 (too large to store)."""

    status: int
    problems: list[Problem]


@dataclass(frozen=True)
class Deleted:
    key: Key
    found: bool
    seq: int | None = None  # the deletion's sequence, when one was recorded


class Recorder(Protocol):
    async def apply(self, manifest: Any, *, dry_run: bool) -> Applied | Refused: ...

    async def delete(self, key: Key) -> Deleted: ...
