"""A Kubernetes API for tests: the emulator, or a real cluster when KUBECONFIG is set."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from runtime.kube import Kube, KubeError
from tests.support.kubeemu import KubeEmulator

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"


@dataclass
class Cluster:
    kube: Kube
    namespace: str
    emulator: KubeEmulator | None

    @property
    def real(self) -> bool:
        return self.emulator is None

    async def connect(self) -> Kube:
        """Another client to the same API (each service has its own, as separate pods do)."""
        if self.emulator is not None:
            kube = Kube.at(self.emulator.url)
        else:
            kube = await Kube.connect()
        await kube.discover()
        return kube

    def need_emulator(self) -> KubeEmulator:
        if self.emulator is None:
            pytest.skip("needs the emulator's test hooks (a real cluster is in use: KUBECONFIG is set)")
        return self.emulator

    async def install_crds(self) -> None:
        for path in sorted(CRDS.glob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            crd = yaml.safe_load(path.read_text())
            with contextlib.suppress(KubeError):
                await self.kube.apply(crd, manager="jetway-tests")
        await self.kube.discover()


@contextlib.asynccontextmanager
async def cluster_for_tests(*, real: bool = False) -> AsyncIterator[Cluster]:
    """A real cluster (from KUBECONFIG) when `real`, else a fresh emulator."""
    if real:
        kube = await Kube.connect()
        await kube.discover()
        namespace = f"jetway-test-{uuid.uuid4().hex[:8]}"
        await kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        try:
            yield Cluster(kube, namespace, None)
        finally:
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
