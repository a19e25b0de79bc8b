"""A Kubernetes API for tests: the emulator, or a real API server.

The real one is the test control plane (tests/cluster/: kube-apiserver, etcd and
kube-controller-manager built from their Go modules), or the cluster KUBECONFIG names. Each
test on a real server gets a namespace of its own. On our own control plane (`owned`) tests may
also make cluster-wide changes (CRDs, webhook configurations) and undo them; on a cluster
KUBECONFIG names they skip those.

What the emulator does through hooks, the helpers here do on a real server as the missing
component would: the kubelet reports a pod Ready or Succeeded through the status subresource,
another project's controller publishes its object's status.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.kube import Gone, Kube, KubeError
from tests.support.kubeemu import KubeEmulator
from tests.support.waiting import eventually

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
CRD_API = "apiextensions.k8s.io/v1"


@dataclass(frozen=True)
class RealServer:
    """A real API server for the session: its kubeconfig, and whether it is ours to change cluster-wide."""

    kubeconfig: str
    owned: bool


@dataclass
class Cluster:
    kube: Kube
    namespace: str
    emulator: KubeEmulator | None
    server: RealServer | None = None
    installed: list[str] = field(default_factory=list)  # CRDs this test installed, removed after it

    @property
    def real(self) -> bool:
        return self.emulator is None

    async def connect(self) -> Kube:
        """Another client to the same API (each service has its own, as separate pods do)."""
        if self.emulator is not None:
            kube = Kube.at(self.emulator.url)
        else:
            assert self.server is not None
            kube = await Kube.connect(self.server.kubeconfig)
        await kube.discover()
        return kube

    def need_emulator(self) -> KubeEmulator:
        if self.emulator is None:
            pytest.skip("needs the emulator's test hooks")
        return self.emulator

    def need_cluster_wide(self) -> None:
        """Skip on a cluster that is not ours: the test changes cluster-scoped objects."""
        if self.server is not None and not self.server.owned:
            pytest.skip("changes cluster-scoped objects: runs on the emulator and the test control plane, not on a shared cluster")

    async def install_crds(self) -> None:
        for path in sorted(CRDS.glob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            crd = yaml.safe_load(path.read_text())
            await self.kube.apply(crd, manager="jetway-tests")  # a CRD the server refuses fails the test, loudly
            if self.real:
                await self.wait_established(crd["metadata"]["name"])
        await self.kube.discover()

    async def wait_established(self, name: str) -> dict[str, Any]:
        async def established() -> dict[str, Any] | None:
            crd = await self.kube.get_or_none(CRD_API, "CustomResourceDefinition", name)
            conditions = {c["type"]: c["status"] for c in (((crd or {}).get("status") or {}).get("conditions") or [])}
            return crd if conditions.get("Established") == "True" else None

        found: dict[str, Any] = await eventually(established, timeout=30, message=f"CRD {name} Established")
        return found

    async def install(self, crd: dict[str, Any]) -> None:
        """Install another project's CRD for this test (removed after it, on a real server)."""
        if self.emulator is not None:
            self.emulator.install(crd)
            return
        self.need_cluster_wide()
        name = crd["metadata"]["name"]
        existing = await self.kube.get_or_none(CRD_API, "CustomResourceDefinition", name)
        if existing is None:
            await self.kube.create(crd)
            self.installed.append(name)
        await self.wait_established(name)
        await self.kube.discover()

    async def uninstall(self, name: str) -> None:
        await self.kube.delete(CRD_API, "CustomResourceDefinition", name)
        if name in self.installed:
            self.installed.remove(name)
        if self.real:
            await eventually(
                lambda: _absent(self.kube, CRD_API, "CustomResourceDefinition", name), timeout=60, message=f"CRD {name} removed"
            )

    async def remove_installed(self) -> None:
        for name in list(self.installed):
            with contextlib.suppress(KubeError):
                await self.uninstall(name)

    async def compact_past(self, api_version: str, kind: str, version: str) -> None:
        """Make `version` too old to watch from: the emulator compacts on request; a real server compacts
        etcd on its own interval (5 s on our control plane), so churn a ConfigMap until a watch from
        `version` answers 410 Gone (the wait is for that condition, never a fixed sleep)."""
        if self.emulator is not None:
            self.emulator.compact()
            return
        churn = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "jetway-churn", "namespace": self.namespace}}

        async def gone() -> bool:
            churn["data"] = {"at": uuid.uuid4().hex}
            await self.kube.apply(churn, manager="jetway-tests")
            try:
                async for _ in self.kube.watch(api_version, kind, version, namespace=self.namespace, timeout=1):
                    pass
            except Gone:
                return True
            return False

        await eventually(gone, timeout=60, interval=0.5, message=f"resourceVersion {version} compacted")

    # --- playing the components the test control plane has not got -------------------------

    async def pods_of(self, kind: str, name: str) -> list[dict[str, Any]]:
        """The pods a Deployment's ReplicaSets or a Job made (by the owner chain)."""
        pods, _ = await self.kube.list("v1", "Pod", self.namespace)
        for pod in pods:  # a real server's list items carry no apiVersion or kind
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
        if kind == "Job":
            return [p for p in pods if _owned_by(p, "Job", name)]
        sets, _ = await self.kube.list("apps/v1", "ReplicaSet", self.namespace)
        mine = {s["metadata"]["name"] for s in sets if _owned_by(s, "Deployment", name)}
        return [p for p in pods if any(_owned_by(p, "ReplicaSet", s) for s in mine)]

    async def report_pods(self, kind: str, name: str, *, ready: int | None = None, succeeded: bool = False) -> None:
        """Be the kubelet for a Deployment's or Job's pods: mark `ready` of them Running and Ready (the rest
        not ready), or all of them Succeeded. The cluster's own controllers then move the owner's status."""
        pods = await eventually(lambda: self.pods_of(kind, name), timeout=30, message=f"pods of {kind} {name}")
        for index, pod in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])):
            now = "2026-01-01T00:00:00Z"
            if succeeded:
                done = [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]
                status: dict[str, Any] = {"phase": "Succeeded", "conditions": done}
            else:
                is_ready = "True" if ready is not None and index < ready else "False"
                status = {
                    "phase": "Running",
                    "startTime": now,
                    "conditions": [
                        {"type": "Ready", "status": is_ready, "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": is_ready, "lastTransitionTime": now},
                    ],
                }
            await self.kube.patch(pod, {"status": status}, subresource="status")


def _owned_by(obj: dict[str, Any], kind: str, name: str) -> bool:
    return any(o.get("kind") == kind and o.get("name") == name for o in obj["metadata"].get("ownerReferences", []))


async def _absent(kube: Kube, api_version: str, kind: str, name: str) -> bool:
    return await kube.get_or_none(api_version, kind, name) is None


@contextlib.asynccontextmanager
async def cluster_for_tests(server: RealServer | None = None) -> AsyncIterator[Cluster]:
    """A namespace of its own on `server` when given, else a fresh emulator."""
    if server is not None:
        kube = await Kube.connect(server.kubeconfig)
        await kube.discover()
        namespace = f"jetway-test-{uuid.uuid4().hex[:8]}"
        await kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        found = Cluster(kube, namespace, None, server)
        try:
            yield found
        finally:
            await found.remove_installed()
            with contextlib.suppress(KubeError):
                await kube.delete("v1", "Namespace", namespace)
            await kube.close()
        return
    emulator = await KubeEmulator(bookmark_interval=0.2).start()
    kube = Kube.at(emulator.url)
    await kube.discover()
    try:
        yield Cluster(kube, "default", emulator)
    finally:
        await kube.close()
        await emulator.stop()


def foreign_crd(group: str, version: str, kind: str, plural: str, *, namespaced: bool = True) -> dict[str, object]:
    """A minimal CRD standing in for another project's (an operator Jetway talks to)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


GATEWAY_API_CRDS = [
    ("gateway.networking.k8s.io", "v1", "Gateway", "gateways"),
    ("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes"),
    ("gateway.networking.k8s.io", "v1beta1", "ReferenceGrant", "referencegrants"),
    ("inference.networking.k8s.io", "v1", "InferencePool", "inferencepools"),
]


def gateway_api_crds() -> list[dict[str, object]]:
    """Stand-ins for the Gateway API and Inference Extension CRDs (what a cluster with them installed serves)."""
    return [foreign_crd(*names) for names in GATEWAY_API_CRDS]
