"""From an object the cluster shows to the event worth recording, purely (Kubernetes mode).

Only what is new becomes an event: a spec, labels or annotations that differ from what is
recorded, a deletion request, an owned object's summarized state that changed. A status-only
change (most often Jetway's own status write echoing back) records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts import kinds
from contracts.admission import Known, judge
from contracts.cluster import DeletionRequested, ObjectObserved, summarize
from contracts.events import Event, ResourceApplied
from contracts.kinds import KINDS
from contracts.meta import WireModel
from contracts.objects import APP_MANAGED_BY, CONTROLLER
from contracts.problems import Problem
from contracts.subjects import Key
from runtime.resources import ResourceState

# Annotations that only restate the object (kubectl's copy of the last applied manifest).
IGNORED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
OWNER_KINDS = ("ModelDeployment", "AgentDeployment")
REPORTED_FIELDS = ("ready", "version", "lastHeartbeat", "upstreamCRDVersion")


@dataclass(frozen=True)
class Rejected:
    """The object breaks the contract (created while the admission webhook was unavailable)."""

    key: Key
    problems: list[Problem]

    def lines(self) -> list[str]:
        return [f"{p.path}: {p.message}" if p.path else p.message for p in self.problems]


def key_of(obj: dict[str, Any]) -> Key:
    return kinds.key_of(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])


def _annotations(meta: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k not in IGNORED_ANNOTATIONS}


def typed(current: ResourceState) -> WireModel:
    """The stored resource as its contract type (what update rules compare against)."""
    doc = current.manifest()
    doc.pop("status", None)
    doc["metadata"] = {k: v for k, v in doc["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    return KINDS[current.key.kind].model.model_validate(doc)


def desired(obj: dict[str, Any], current: ResourceState | None) -> Event | Rejected | None:
    """The event one of Jetway's kinds, as the cluster shows it now, is worth; None if nothing new."""
    meta = obj["metadata"]
    key = key_of(obj)
    if meta.get("deletionTimestamp"):
        return DeletionRequested(kind=key.kind, namespace=key.namespace, name=key.name) if current and not current.deleting else None
    doc = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            k: v
            for k, v in (
                ("name", meta["name"]),
                ("namespace", meta.get("namespace")),
                ("labels", meta.get("labels")),
                ("annotations", _annotations(meta)),
            )
            if v
        },
        "spec": obj.get("spec") or {},
    }
    # what the webhook judged already, less what it knew and this cannot (the providers as the API server had them)
    known = Known()
    if current is not None:
        known = Known(old=typed(current), recorded_provider=current.status().get("provider", {}).get("name"))
    verdict = judge(doc, known)
    if not verdict.ok or verdict.obj is None:
        return Rejected(key, verdict.problems)
    wire = verdict.obj.wire()
    spec, labels, annotations = wire.get("spec", {}), dict(meta.get("labels") or {}), _annotations(meta)
    generation = int(meta.get("generation") or 1)
    if current is not None and (current.spec, current.labels, current.annotations, current.generation, current.uid) == (
        spec,
        labels,
        annotations,
        generation,
        meta.get("uid", ""),
    ):
        return None
    return ResourceApplied(
        kind=key.kind,
        namespace=key.namespace,
        name=key.name,
        generation=generation,
        spec=spec,
        labels=labels,
        annotations=annotations,
        uid=meta.get("uid", ""),
        created_at=meta.get("creationTimestamp", ""),
    )


def reported(obj: dict[str, Any]) -> dict[str, Any]:
    """The readiness a provider's own controller reports on its config (Jetway's built-ins report theirs as events)."""
    status = obj.get("status") or {}
    return {k: status[k] for k in REPORTED_FIELDS if k in status}


def owner_of(obj: dict[str, Any]) -> Key | None:
    """The resource whose controller reference the object carries, if it is one of Jetway's."""
    for owner in obj["metadata"].get("ownerReferences") or []:
        if owner.get("controller") and owner.get("kind") in OWNER_KINDS and str(owner.get("apiVersion", "")).startswith("airunway.ai/"):
            return Key(owner["kind"], obj["metadata"].get("namespace", ""), owner["name"])
    return None


def observation(obj: dict[str, Any], *, exists: bool = True) -> tuple[Key, ObjectObserved] | None:
    """(the key to record on, the observation): an owned object on its owner, a Gateway on itself, and so an
    InferencePool no resource of Jetway's owns (a provider's, which a deployment's HTTPRoute may route to)."""
    itself = Key(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
    if obj["kind"] == "Gateway":
        key: Key | None = itself
    elif obj["kind"] == "InferencePool":
        key = owner_of(obj) or itself
    else:
        key = owner_of(obj)
    if key is None:
        return None
    return key, ObjectObserved(
        api_version=obj["apiVersion"],
        object_kind=obj["kind"],
        object_name=obj["metadata"]["name"],
        exists=exists,
        summary=summarize(obj) if exists else {},
    )


def managed(obj: dict[str, Any]) -> bool:
    """Whether Jetway wrote the object (its label says so): what the watcher observes on its owner."""
    return (obj["metadata"].get("labels") or {}).get(APP_MANAGED_BY) == CONTROLLER


def claims_named(spec: dict[str, Any]) -> set[str]:
    """The pre-existing claims a ModelDeployment's (wire) spec mounts: volumes without a size, which
    Jetway creates nothing for. Read from the dict, not the model: it runs for every claim event."""
    storage = (spec.get("model") or {}).get("storage") or {}
    return {v["claimName"] for v in storage.get("volumes") or [] if not v.get("size") and v.get("claimName")}


def claim_observation(name: str, claim: dict[str, Any] | None) -> ObjectObserved:
    """A pre-existing claim as a deployment that mounts it is told of it: its phase, or that it is missing."""
    return ObjectObserved(
        api_version="v1",
        object_kind="PersistentVolumeClaim",
        object_name=name,
        exists=claim is not None,
        summary=summarize(claim) if claim is not None else {},
        referenced=True,
    )
