"""What the node tests do with kubectl: run a pod, wait for it, run a command in it, read objects."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from typing import Any

import yaml

from testbed.cluster.node import NodeCluster


def apply(cluster: NodeCluster, *documents: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))


def get(cluster: NodeCluster, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return found


def namespace(cluster: NodeCluster, name: str) -> str:
    apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def pod(name: str, ns: str, image: str, command: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": True,
            "containers": [{"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": command}],
        },
    }


def wait_ready(cluster: NodeCluster, ns: str, selector: str, timeout: float = 120) -> None:
    """Every pod the selector picks Ready (kubectl's own wait, which watches)."""
    deadline = time.monotonic() + timeout
    while True:  # `kubectl wait` refuses at once while no pod matches yet
        listed = get(cluster, "pods", "-n", ns, "-l", selector)
        if listed["items"]:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no pod {selector} in {ns} within {timeout:.0f} s")
        time.sleep(0.2)
    left = max(deadline - time.monotonic(), 1)
    wait = ("wait", "-n", ns, "--for=condition=Ready", "pod", "-l", selector, f"--timeout={left:.0f}s")
    done = cluster.kubectl(*wait, check=False, timeout=left + 30)
    if done.returncode != 0:
        described = cluster.kubectl("describe", "pods", "-n", ns, "-l", selector, check=False).stdout
        raise AssertionError(f"pods {selector} in {ns} not Ready: {done.stderr}\n{described[-3000:]}")


def wait_served(cluster: NodeCluster, ns: str, service: str, timeout: float = 60) -> str:
    """The Service's ClusterIP once kube-proxy sends it on: a pod Ready is not yet an endpoint programmed
    (until then kube-proxy rejects a connection with EHOSTUNREACH)."""
    found = get(cluster, "service", service, "-n", ns)["spec"]
    address, port = found["clusterIP"], found["ports"][0]["port"]
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address, port), timeout=5).close()
            return str(address)
        except OSError as failure:
            if time.monotonic() > deadline:
                raise AssertionError(f"service {ns}/{service} ({address}:{port}) not served within {timeout:.0f} s: {failure}") from None
            time.sleep(0.2)


def run_in(cluster: NodeCluster, ns: str, name: str, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`kubectl exec` (through the API server, the kubelet and containerd's streaming server)."""
    return cluster.kubectl("exec", "-n", ns, name, "--", *command, check=False, timeout=timeout)


def python_in(cluster: NodeCluster, ns: str, name: str, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_in(cluster, ns, name, "python3", "-c", script, timeout=timeout)
