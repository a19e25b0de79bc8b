"""Events of Kubernetes mode: what the watcher sees in the cluster, beyond desired state."""

from __future__ import annotations

from typing import Any

from contracts.events import Decision, Event, register


class DeletionRequested(Event, frozen=True, tag="DeletionRequested.v1"):
    """The resource has a deletionTimestamp: its objects are to be cleaned up, then it goes."""

    kind: str
    namespace: str
    name: str


class ObjectObserved(Event, frozen=True, tag="ObjectObserved.v1"):
    """An object Jetway owns changed in the cluster (recorded on its owner, facet `observed`).

    An observation, not a decision: it carries no status slice of its own."""

    api_version: str = ""
    object_kind: str = ""
    object_name: str = ""
    exists: bool = True
    summary: dict[str, Any] = {}  # the status fields that matter, trimmed

    def describe(self) -> str:
        state = (
            "gone" if not self.exists else ", ".join(f"{k}={v}" for k, v in sorted(self.summary.items()) if not isinstance(v, dict | list))
        )
        return f"{self.object_kind}/{self.object_name}: {state}"


class ApisDiscovered(Event, frozen=True, tag="ApisDiscovered.v1"):
    """What the cluster serves (recorded on `cluster/discovery` when it changes)."""

    resources: tuple[str, ...] = ()  # "group/version/plural"

    def serves(self, group_version: str, plural: str) -> bool:
        return f"{group_version}/{plural}" in self.resources

    def describe(self) -> str:
        return f"{len(self.resources)} resources served"


class WorkloadObserved(Decision, frozen=True, tag="WorkloadObserved.v1"):
    """The workload's state as the cluster reports it: phase, replicas, Ready."""

    provider: str = ""

    def describe(self) -> str:
        return f"{self.provider}: {self.status.phase}"


register(DeletionRequested, ObjectObserved, ApisDiscovered, WorkloadObserved)
