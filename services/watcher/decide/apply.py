"""Applying a manifest: what changes, what the answer says. Pure: no I/O.

Kubernetes and Airdress semantics together: `generation` moves only when the spec or the
labels change; an identical manifest is `unchanged` and records nothing; a present
`metadata.resourceVersion` must match the stored one (else 409), an absent one means the
last writer wins.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from contracts import kinds
from contracts.events import ResourceApplied
from contracts.frontdoor import Action
from contracts.meta import WireModel
from contracts.subjects import Key
from runtime.resources import ResourceState


@dataclass(frozen=True)
class Plan:
    key: Key
    action: Action
    generation: int
    previous_generation: int | None
    event: ResourceApplied | None  # None when nothing is to be recorded
    expected_seq: int  # the spec facet's last sequence the plan was made against


@dataclass(frozen=True)
class Stale:
    key: Key
    given: str
    stored: int | None

    @property
    def message(self) -> str:
        if self.stored is None:
            return (
                f"resource_version is stale: {self.key.kind}/{self.key.name} does not exist (given {self.given!r}); "
                "remove metadata.resourceVersion to create it"
            )
        return (
            f"resource_version is stale: given {self.given!r}, stored {self.stored}; "
            "read it again (jetway get) or remove metadata.resourceVersion to overwrite"
        )


def key_of(obj: WireModel) -> Key:
    return kinds.key_of(obj.kind, obj.metadata.namespace, obj.metadata.name)  # type: ignore[attr-defined]


def plan(obj: WireModel, current: ResourceState | None, *, requested_version: str | None, dry_run: bool) -> Plan | Stale:
    """What applying an admitted object would do against what is stored."""
    key = key_of(obj)
    if requested_version is not None and (current is None or requested_version != str(current.resource_version)):
        return Stale(key, requested_version, current.resource_version if current else None)
    wire: dict[str, Any] = obj.wire()
    spec = wire.get("spec", {})
    meta = wire.get("metadata", {})
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    if current is None:
        event = ResourceApplied(
            kind=key.kind,
            namespace=key.namespace,
            name=key.name,
            generation=1,
            spec=spec,
            labels=labels,
            annotations=annotations,
            uid=str(uuid.uuid4()),
        )
        return Plan(key, "would_create" if dry_run else "created", 1, None, None if dry_run else event, 0)
    changed = spec != current.spec or labels != current.labels
    if not changed and annotations == current.annotations:
        return Plan(key, "unchanged", current.generation, current.generation, None, current.resource_version)
    generation = current.generation + 1 if changed else current.generation
    event = ResourceApplied(
        kind=key.kind,
        namespace=key.namespace,
        name=key.name,
        generation=generation,
        spec=spec,
        labels=labels,
        annotations=annotations,
        uid=current.uid,
        created_at=current.created_at.isoformat() if current.created_at else "",
    )
    return Plan(
        key,
        "would_update" if dry_run else "configured",
        generation,
        current.generation,
        None if dry_run else event,
        current.resource_version,
    )
