"""A Kubernetes API for tests: the emulator, or a real API server.

The real one is the test control plane (testbed/cluster/: kube-apiserver, etcd and
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
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.kube import Gone, Kube, KubeError
from testbed.cluster import thirdparty
from testbed.kubeemu import KubeEmulator
from testbed.waiting import eventually

CRDS = Path(__file__).resolve().parents[1] / "deploy" / "crds"
CRD_API = "apiextensions.k8s.io/v1"
RBAC_API = "rbac.authorization.k8s.io/v1"


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
    namespaces: list[str] = field(default_factory=list)  # more namespaces this test made, removed after it
    cluster_roles: list[str] = field(default_factory=list)  # ClusterRoles (and their bindings) of those identities
    files: tempfile.TemporaryDirectory[str] | None = None  # kubeconfigs of the identities this test made

    @property
    def real(self) -> bool:
        return self.emulator is None

    async def connect(self, kubeconfig: str | None = None) -> Kube:
        """Another client to the same API (each service has its own, as separate pods do); on a real
        server as the identity `kubeconfig` holds, when given (see `identity`)."""
        if self.emulator is not None:
            kube = Kube.at(self.emulator.url)
        else:
            assert self.server is not None
            kube = await Kube.connect(kubeconfig or self.server.kubeconfig)
        await kube.discover()
        return kube

    async def other_namespace(self, suffix: str) -> str:
        """A second namespace for the test: on a real server a new one (removed after the test); the
        emulator needs none made and takes `suffix` as it is."""
        if self.emulator is not None:
            return suffix
        name = f"{self.namespace}-{suffix}"
        await self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.namespaces.append(name)
        return name

    async def install_gateway_apis(self) -> None:
        """The Gateway API and Inference Extension CRDs: upstream's own on a real server (their schemas,
        defaults and CEL rules); on the emulator the stand-ins, so that it needs no Go."""
        if self.emulator is not None:
            for crd in gateway_api_crds():
                self.emulator.install(crd)
            await self.kube.discover()
            return
        for crd in thirdparty.gateway_api_crds():
            await self.install(crd)

    async def identity(self, name: str, rules: list[dict[str, Any]]) -> str:
        """A kubeconfig for a ServiceAccount `name` of the test's namespace holding only `rules`, bound
        cluster-wide as deploy/ binds each service's ClusterRole (removed after the test), with a token
        from the TokenRequest API: the real server authorizes its requests by RBAC. Real servers only
        (the emulator has no RBAC: its `forbidden` hook refuses a verb)."""
        assert self.server is not None, "the emulator has no RBAC"
        self.need_cluster_wide()
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": self.namespace}}
        await self.kube.create(account)
        role = {"name": f"{self.namespace}-{name}"}
        self.cluster_roles.append(role["name"])
        await self.kube.create({"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": role, "rules": rules})
        await self.kube.create(
            {
                "apiVersion": RBAC_API,
                "kind": "ClusterRoleBinding",
                "metadata": role,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["name"]},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
            }
        )
        first = rules[0]  # RBAC takes new bindings from a cache: wait until the authorizer has this one
        attributes = {"verb": first["verbs"][0], "group": first["apiGroups"][0], "resource": first["resources"][0]}
        user = f"system:serviceaccount:{self.namespace}:{name}"
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": attributes},
        }

        async def allowed() -> bool:
            answer = await self.kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
            return bool(answer.get("status", {}).get("allowed"))

        await eventually(allowed, timeout=30, message=f"{user} authorized")
        issued = await self.kube.request(
            "POST",
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )
        if self.files is None:
            self.files = tempfile.TemporaryDirectory(prefix="jetway-identity-")
        return _token_kubeconfig(self.server.kubeconfig, name, issued["status"]["token"], Path(self.files.name))

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


def _token_kubeconfig(admin: str, name: str, token: str, folder: Path) -> str:
    """A kubeconfig for the server `admin` names, authenticating with `token` alone."""
    config = yaml.safe_load(Path(admin).read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config.get("current-context", c["name"]))
    server = next(c for c in config["clusters"] if c["name"] == context["cluster"])
    mine = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [server],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": server["name"], "user": name}}],
    }
    path = folder / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(mine))
    return str(path)


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
            for role in found.cluster_roles:
                for kind in ("ClusterRoleBinding", "ClusterRole"):
                    with contextlib.suppress(KubeError):
                        await kube.delete(RBAC_API, kind, role)
            for made in [namespace, *found.namespaces]:
                with contextlib.suppress(KubeError):
                    await kube.delete("v1", "Namespace", made)
            if found.files is not None:
                found.files.cleanup()
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
