"""`kubectl apply --server-side -k deploy/` against a real API server, as a user's first install.

No kubelet runs, so no image is pulled and no container starts; what the API server decides is
all here: every CRD Established (the CEL cost estimator accepted every rule), RBAC and webhook
configurations accepted, every object of the kustomization created, and the pods the
Deployments' ReplicaSets make admitted by the namespace's Pod Security level.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.kubeapi import RealServer
from tests.support.cli import ROOT

KUBECTL = Path(sys.executable).parent / "kubectl"


def kubectl(server: RealServer, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(KUBECTL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "KUBECONFIG": server.kubeconfig},
        check=False,
    )
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done


def get(server: RealServer, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    args = ["get", kind, name, "-o", "yaml"] + (["-n", namespace] if namespace else [])
    found: dict[str, Any] = yaml.safe_load(kubectl(server, *args).stdout)
    return found


@pytest.fixture
def applied(real_server: RealServer) -> Iterator[tuple[RealServer, subprocess.CompletedProcess[str], list[dict[str, Any]]]]:
    if not real_server.owned:
        pytest.skip("installs deploy/ cluster-wide: runs on the test control plane, not on a shared cluster")
    built = kubectl(real_server, "kustomize", str(ROOT / "deploy"))
    objects = [d for d in yaml.safe_load_all(built.stdout) if d]
    done = kubectl(real_server, "apply", "--server-side", "--field-manager=jetway-install", "-k", str(ROOT / "deploy"), check=False)
    try:
        yield real_server, done, objects
    finally:
        # everything goes again (the webhook configurations would refuse other tests' objects: nothing serves them)
        kubectl(real_server, "delete", "-k", str(ROOT / "deploy"), "--ignore-not-found", "--wait=true", check=False, timeout=300)


def test_deploy_applies_server_side_and_every_object_is_accepted(
    applied: tuple[RealServer, subprocess.CompletedProcess[str], list[dict[str, Any]]],
) -> None:
    server, done, objects = applied
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # no deprecated API, no Pod Security warning, no unknown field

    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        found = get(
            server,
            f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else obj["kind"],
            obj["metadata"]["name"],
            namespace,
        )
        assert found["metadata"]["uid"], f"{obj['kind']}/{obj['metadata']['name']} not created"

    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 5
    for crd in crds:
        kubectl(server, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
        status = get(server, "crd", crd["metadata"]["name"])["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["NamesAccepted"]["status"] == "True"
        assert "NonStructuralSchema" not in conditions

    for name in ("jetway",):
        validating = get(server, "validatingwebhookconfiguration", name)
        mutating = get(server, "mutatingwebhookconfiguration", name)
        assert validating["webhooks"][0]["failurePolicy"] == "Fail" and mutating["webhooks"][0]["failurePolicy"] == "Ignore"

    # the ReplicaSets' pods pass the namespace's Pod Security level ("restricted"): none refused
    for deployment in [o for o in objects if o["kind"] == "Deployment"]:
        name, replicas = deployment["metadata"]["name"], deployment["spec"]["replicas"]
        wanted = f"--for=jsonpath={{.status.replicas}}={replicas}"
        kubectl(server, "wait", wanted, "--timeout=60s", f"deployment/{name}", "-n", "jetway-system")
        sets = yaml.safe_load(kubectl(server, "get", "replicasets", "-n", "jetway-system", "-o", "yaml").stdout)["items"]
        for replica_set in sets:
            failures = [c for c in (replica_set.get("status") or {}).get("conditions", []) if c["type"] == "ReplicaFailure"]
            assert not failures, f"{replica_set['metadata']['name']}: {failures}"


def test_each_service_account_may_do_what_its_role_says_and_no_more(
    applied: tuple[RealServer, subprocess.CompletedProcess[str], list[dict[str, Any]]],
) -> None:
    server, done, _ = applied
    assert done.returncode == 0, done.stderr

    def can(account: str, verb: str, resource: str, namespace: str = "default") -> bool:
        answer = kubectl(
            server, "auth", "can-i", verb, resource, "-n", namespace, f"--as=system:serviceaccount:jetway-system:{account}", check=False
        )
        return answer.stdout.strip() == "yes"

    assert can("jetway-workload", "create", "deployments.apps") and can("jetway-workload", "patch", "deployments.apps")
    assert can("jetway-watcher", "patch", "modeldeployments.airunway.ai/status")
    assert can("jetway-storage", "create", "persistentvolumeclaims")
    assert not can("jetway-selector", "get", "secrets")  # the selector never talks to the API server
    assert not can("jetway-watcher", "create", "deployments.apps")  # the watcher reads and reports, it writes no workload
    assert not can("jetway-workload", "get", "secrets", "kube-system")
    assert not can("jetway-storage", "create", "deployments.apps")
