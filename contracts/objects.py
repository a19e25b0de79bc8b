"""How Jetway names, labels and owns the Kubernetes objects it writes (shared by every service)."""

from __future__ import annotations

import hashlib
from typing import Any

from contracts.subjects import Key

# AI Runway's own label, with its value: user tooling, policies and dashboards select on it, so Jetway
# writes what AI Runway writes. Which controller did it is the standard label's job.
MANAGED_BY = "airunway.ai/managed-by"
MANAGER = "airunway"
APP_MANAGED_BY = "app.kubernetes.io/managed-by"
CONTROLLER = "jetway"
MANAGED_SELECTOR = f"{APP_MANAGED_BY}={CONTROLLER}"  # what the watcher lists and watches of its own
DEPLOYMENT = "airunway.ai/deployment"
MODEL_DEPLOYMENT = "airunway.ai/model-deployment"
ENGINE_TYPE = "airunway.ai/engine-type"
MODEL_SOURCE = "airunway.ai/model-source"
JOB_TYPE = "airunway.ai/job-type"
PAUSED = "airunway.ai/reconcile-paused"
DYNAMO_TEST_BACKEND = "airunway.ai/dynamo-test-backend"  # "mocker": Dynamo's GPU-less test backend
# A cluster-scoped object cannot name a namespaced owner (the garbage collector never resolves it), so such
# an object records its owner here, and the writer checks it as it checks a controller reference.
OWNER_UID = "jetway.dev/owner-uid"
MODEL_DEPLOYMENT_NAMESPACE = "jetway.dev/model-deployment-namespace"  # with MODEL_DEPLOYMENT, on cluster-scoped objects


def managed_labels() -> dict[str, str]:
    """On every object Jetway writes (PVCs and download Jobs included)."""
    return {MANAGED_BY: MANAGER, APP_MANAGED_BY: CONTROLLER}


NAME_LIMIT = 63  # a Service's name (DNS-1035 label) and a label value


def child_name(parent: str, suffix: str) -> str:
    """`<parent><suffix>`; when that passes 63 characters, the parent is cut short and a hash of it keeps
    distinct parents apart (`<parent[:n]>-<hash><suffix>`), so a name admission took still names a Service."""
    name = parent + suffix
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(parent.encode()).hexdigest()[:8]
    return f"{parent[: NAME_LIMIT - len(suffix) - len(digest) - 1].rstrip('-')}-{digest}{suffix}"


def owner_references(key: Key, uid: str, *, api_version: str = "airunway.ai/v1alpha1") -> list[dict[str, Any]]:
    """The controller reference to the owning resource; none when its uid is unknown (offline render)."""
    if not uid:
        return []
    return [{"apiVersion": api_version, "kind": key.kind, "name": key.name, "uid": uid, "controller": True, "blockOwnerDeletion": True}]


def cluster_scoped_name(key: Key) -> str:
    """The name of a cluster-scoped object made for a namespaced resource: `<name>.<namespace>`, unique
    across namespaces (both parts are DNS labels, so the dot cannot be ambiguous)."""
    return f"{key.name}.{key.namespace}" if key.namespace else key.name


def metadata(name: str, key: Key, uid: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": key.namespace or "default", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    owners = owner_references(key, uid)
    if owners:
        meta["ownerReferences"] = owners
    return meta


def ref(obj: dict[str, Any]) -> dict[str, Any]:
    """Just enough of an object to find it again: apiVersion, kind, namespace, name."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {"name": meta["name"], "namespace": meta.get("namespace")}}
