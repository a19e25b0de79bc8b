"""Events of Kubernetes mode: what the watcher sees in the cluster, beyond desired state.

Observations are plain events (not decisions): they carry no status slice, nobody "owns" them,
and the status composed for a resource ignores them. `summarize` decides, purely, which fields
of an observed object are worth an event, so a change elsewhere in the object records nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contracts.events import Decision, Event, StatusCondition, StatusSlice, register
from contracts.subjects import OBSERVED as OBSERVED  # the facet observations of a resource's objects are recorded on
from contracts.subjects import Key

CLEANUP_FINALIZER = "airunway.ai/jetway-cleanup"
DISCOVERY = Key("Cluster", "", "discovery")  # where ApisDiscovered is recorded (by the watcher)


class DeletionRequested(Event, frozen=True, tag="DeletionRequested.v1"):
    """The resource has a deletionTimestamp: its objects are to be cleaned up, then it goes."""

    kind: str
    namespace: str
    name: str


class ObjectObserved(Event, frozen=True, tag="ObjectObserved.v1"):
    """An object Jetway owns (or reads, like a Gateway) changed in the cluster.

    Recorded on its owner's key, facet `observed` (a Gateway, and an InferencePool no resource of Jetway's owns: a
    provider's own, which the gateway routes to, on its own key)."""

    api_version: str = ""
    object_kind: str = ""
    object_name: str = ""
    exists: bool = True
    summary: dict[str, Any] = {}  # the status fields that matter, trimmed (see `summarize`)
    # a pre-existing claim the deployment's volumes name, not one written for it: reported whoever owns it,
    # and reported missing too (`exists=False`), since the storage decision waits or fails on it
    referenced: bool = False

    def describe(self) -> str:
        if not self.exists:
            return f"{self.object_kind}/{self.object_name}: {'missing' if self.referenced else 'gone'}"
        state = ", ".join(f"{k}={v}" for k, v in sorted(self.summary.items()) if not isinstance(v, dict | list))
        return f"{self.object_kind}/{self.object_name}: {state}"


class ApisDiscovered(Event, frozen=True, tag="ApisDiscovered.v1"):
    """What the cluster serves (recorded on `cluster/discovery` when it changes)."""

    resources: tuple[str, ...] = ()  # "group/version/plural" ("v1/services" for the core group)

    def serves(self, group_version: str, plural: str) -> bool:
        return f"{group_version}/{plural}" in self.resources

    def serves_inference_gateway(self) -> bool:
        """InferencePools and HTTPRoutes both served: Gateway API Inference Extension integration is possible."""
        return self.serves("inference.networking.k8s.io/v1", "inferencepools") and self.serves("gateway.networking.k8s.io/v1", "httproutes")

    def serves_group(self, group: str) -> bool:
        return any(r.split("/", 1)[0] == group for r in self.resources if r.count("/") == 2)

    def describe(self) -> str:
        return f"{len(self.resources)} resources served"


class WorkloadObserved(Decision, frozen=True, tag="WorkloadObserved.v1"):
    """The workload's state as the cluster reports it: phase, replicas, Ready."""

    provider: str = ""

    def holds_objects(self) -> bool:
        return True

    def describe(self) -> str:
        return f"{self.provider}: {self.status.phase}"


class SpecRejected(Decision, frozen=True, tag="SpecRejected.v1"):
    """A change in the cluster breaks the contract (made while the admission webhook was down):
    Jetway keeps working from the last accepted spec and says why it did not take the new one."""

    problems: tuple[str, ...] = ()

    def describe(self) -> str:
        return "; ".join(self.problems)


def validation_failed(generation: int, message: str, when: str = "") -> StatusCondition:
    return StatusCondition(
        type="Validated", status="False", reason="ValidationFailed", message=message, observedGeneration=generation, lastTransitionTime=when
    )


def rejected(generation: int, problems: list[str]) -> SpecRejected:
    message = "spec rejected, still serving the last accepted one: " + "; ".join(problems)
    condition = validation_failed(generation, message)
    return SpecRejected(
        generation=generation, problems=tuple(problems), status=StatusSlice(conditions=(condition,), phase="Failed", message=message)
    )


register(DeletionRequested, ObjectObserved, ApisDiscovered, WorkloadObserved, SpecRejected)


def deleted_by_hand(observed: dict[tuple[str, str], ObjectObserved], objects: Iterable[dict[str, Any]]) -> bool:
    """Whether the cluster reported one of `objects` (what a decision stands for) deleted: write them again.
    Objects of earlier decisions that were removed on purpose do not count."""
    held = {(o["kind"], o["metadata"]["name"]) for o in objects}
    return any(not seen.exists for where, seen in observed.items() if where in held)


def _conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("type", "status", "reason", "message", "observedGeneration")
    return [{k: c.get(k) for k in keep if c.get(k) is not None} for c in status.get("conditions") or []]


def summarize(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields of an observed object that decisions depend on."""
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    if kind == "Deployment":
        return {
            "replicas": spec.get("replicas", 1),
            "readyReplicas": status.get("readyReplicas", 0),
            "availableReplicas": status.get("availableReplicas", 0),
            "updatedReplicas": status.get("updatedReplicas", 0),
            "conditions": _conditions(status),
        }
    if kind == "PersistentVolumeClaim":
        return {"phase": status.get("phase", "Pending")}
    if kind == "Job":
        return {
            "active": status.get("active", 0),
            "succeeded": status.get("succeeded", 0),
            "failed": status.get("failed", 0),
            "conditions": _conditions(status),
        }
    if kind == "DynamoGraphDeployment":
        return {"state": status.get("state", ""), "message": status.get("message", ""), "conditions": _conditions(status)}
    if kind == "Workspace":
        return {"state": status.get("state", ""), "conditions": _conditions(status)}
    if kind == "RayService":
        applications = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
        return {"conditions": _conditions(status), "applications": {name: app.get("status", "") for name, app in applications.items()}}
    if kind == "Gateway":
        return {
            "generation": (obj.get("metadata") or {}).get("generation", 1),
            "labels": dict((obj.get("metadata") or {}).get("labels") or {}),
            "gatewayClassName": spec.get("gatewayClassName", ""),
            "listeners": spec.get("listeners") or [],
            "addresses": [a.get("value") for a in status.get("addresses") or [] if a.get("value")],
            "listenerStatus": {
                item.get("name", ""): {
                    c.get("type"): {"status": c.get("status"), "observedGeneration": c.get("observedGeneration")}
                    for c in item.get("conditions") or []
                }
                for item in status.get("listeners") or []
            },
        }
    if kind in ("InferencePool", "HTTPRoute", "Agent"):
        return {"conditions": _conditions(status)}
    if kind == "Service":
        return {
            "clusterIP": spec.get("clusterIP", ""),
            "ports": [{k: p.get(k) for k in ("name", "port") if k in p} for p in spec.get("ports") or []],
        }
    return {}
