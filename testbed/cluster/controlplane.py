"""A real Kubernetes control plane on 127.0.0.1 for the test suite, in the spirit of envtest.

etcd (temporary data dir, free ports), kube-apiserver (TLS, a client-certificate admin,
`--authorization-mode=Node,RBAC`, the default admission plugins, a short etcd compaction
interval so that `410 Gone` happens for real) and kube-controller-manager (garbage collection,
namespaces, Deployments → ReplicaSets → Pods, Jobs, service-account tokens). No scheduler and
no kubelet: pods are created and stay unscheduled; a test that needs a running pod plays the
kubelet through the status subresource.

By hand: `python -m testbed.cluster` starts one and prints the `export KUBECONFIG=...` line.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from runtime.natsserver import free_port
from testbed.cluster import pki

COMPACTION_INTERVAL = "5s"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    # a PVC or PV in use keeps its protection finalizer until this releases it: without it, every test
    # namespace holding a PVC would stay Terminating for the rest of the session
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)


# With a node (testbed/cluster/node.py), what a real cluster's controller manager also runs for pods that
# really run: nodes' health and taints, Services' endpoints, StatefulSets and their volumes, disruption
# budgets, quotas, and the garbage collection of pods a node lost.
NODE_CONTROLLERS = (
    *CONTROLLERS,
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "statefulset-controller",
    "persistentvolume-binder-controller",
    "disruption-controller",
    "resourcequota-controller",
    "daemonset-controller",
    "ttl-after-finished-controller",
)


class ControlPlaneError(RuntimeError):
    pass


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_document(server: str, ca_pem: bytes, user: dict[str, str], name: str = "jetway-test") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }


@dataclass
class ControlPlane:
    bin_dir: Path
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jetway-kube-")))
    compaction_interval: str = COMPACTION_INTERVAL
    # where the API server listens and what it advertises; a node's pods reach it there (through the
    # `kubernetes` Service, whose endpoint is then reconciled to this address)
    address: str = "127.0.0.1"
    with_nodes: bool = False  # kubelets join: the node controllers, endpoints, a client certificate for kubelets
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    server: str = ""
    ca_pem: bytes = b""
    ca: pki.CertificateAuthority | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.work / "kubeconfig"

    def log(self, component: str) -> Path:
        return self.work / f"{component}.log"

    def _spawn(self, component: str, args: list[str]) -> subprocess.Popen[bytes]:
        with self.log(component).open("ab") as log:
            process = subprocess.Popen(
                [str(self.bin_dir / component), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        self.processes[component] = process
        return process

    def _tail(self, component: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log(component).read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _wait(self, component: str, url: str, context: ssl.SSLContext | None, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            process = self.processes[component]
            if process.poll() is not None:
                raise ControlPlaneError(f"{component} exited with {process.returncode}:\n{self._tail(component)}")
            try:
                with urllib.request.urlopen(url, context=context, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ControlPlaneError(f"{component} not ready at {url} within {timeout:.0f}s ({last}):\n{self._tail(component)}")

    def _write(self, name: str, data: bytes, private: bool = False) -> Path:
        path = self.work / name
        if private:
            path.touch(mode=0o600)
        path.write_bytes(data)
        return path

    def start(self, timeout: float = 180.0) -> ControlPlane:
        self.work.mkdir(parents=True, exist_ok=True)
        ca = self.ca = pki.CertificateAuthority.new()
        self.ca_pem = ca.cert_pem
        ca_file = self._write("ca.crt", ca.cert_pem)
        serving = ca.issue(
            "kube-apiserver",
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
            ips=tuple(dict.fromkeys(("127.0.0.1", self.address, *((KUBERNETES_SERVICE_IP,) if self.with_nodes else ())))),
            server=True,
        )
        admin = ca.issue("jetway-test-admin", organizations=("system:masters",))
        manager = ca.issue("system:kube-controller-manager")
        sa_private, sa_public = pki.service_account_keys()
        serving_cert, serving_key = self._write("apiserver.crt", serving.cert_pem), self._write("apiserver.key", serving.key_pem, True)
        sa_key, sa_pub = self._write("sa.key", sa_private, True), self._write("sa.pub", sa_public)

        etcd_port, peer_port, api_port = free_port(), free_port(), free_port(self.address)
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                "--name=jetway-test",
                f"--data-dir={self.work / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=jetway-test=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # a throwaway store: durability buys nothing here
                "--log-level=warn",
            ],
        )
        self._wait("etcd", f"{etcd_url}/health", None, 30)

        self.server = f"https://{self.address}:{api_port}"
        if self.with_nodes:
            # a cluster as users run one: the watch cache on, etcd compacted every five minutes
            history = ["--watch-cache=true"]
            kubelet_client = ca.issue("kube-apiserver-kubelet-client", organizations=("system:masters",))
            nodes = [
                "--endpoint-reconciler-type=lease",
                f"--kubelet-client-certificate={self._write('kubelet-client.crt', kubelet_client.cert_pem)}",
                f"--kubelet-client-key={self._write('kubelet-client.key', kubelet_client.key_pem, True)}",
                f"--kubelet-certificate-authority={ca_file}",
                "--kubelet-preferred-address-types=InternalIP",
            ]
        else:
            # Watches are served by etcd, so a resourceVersion older than the last compaction gets 410
            # Gone, as on a busy cluster whose watch cache has moved on. With the cache, a quiet test
            # cluster would serve every old version from memory and no watch would ever expire.
            history = [f"--etcd-compaction-interval={self.compaction_interval}", "--watch-cache=false"]
            nodes = ["--endpoint-reconciler-type=none"]  # 127.0.0.1 is no address for the kubernetes Service's endpoints
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                *history,
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={api_port}",
                f"--tls-cert-file={serving_cert}",
                f"--tls-private-key-file={serving_key}",
                f"--client-ca-file={ca_file}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                *nodes,
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={self.work / 'apiserver-certs'}",
            ],
        )
        admin_context = ssl.create_default_context(cadata=ca.cert_pem.decode())
        with tempfile.TemporaryDirectory() as keys:
            cert, key = Path(keys) / "admin.crt", Path(keys) / "admin.key"
            cert.write_bytes(admin.cert_pem)
            key.write_bytes(admin.key_pem)
            admin_context.load_cert_chain(cert, key)
        self._wait("kube-apiserver", f"{self.server}/readyz", admin_context, timeout)

        admin_user = {"client-certificate-data": _b64(admin.cert_pem), "client-key-data": _b64(admin.key_pem)}
        self._write("kubeconfig", yaml.safe_dump(kubeconfig_document(self.server, ca.cert_pem, admin_user)).encode(), True)
        manager_user = {"client-certificate-data": _b64(manager.cert_pem), "client-key-data": _b64(manager.key_pem)}
        manager_config = self._write(
            "controller-manager.kubeconfig", yaml.safe_dump(kubeconfig_document(self.server, ca.cert_pem, manager_user)).encode(), True
        )
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={manager_config}",
                f"--controllers={','.join(NODE_CONTROLLERS if self.with_nodes else CONTROLLERS)}",
                "--use-service-account-credentials=true",  # each controller as its own service account, as clusters run it
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca_file}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        self._wait_for_default_service_account(admin_context, timeout)
        return self

    def client_kubeconfig(self, name: str, common_name: str, organizations: tuple[str, ...] = ()) -> Path:
        """A kubeconfig (in the work folder, `<name>.kubeconfig`) for a client certificate this plane's CA issues:
        a node's kubelet is `system:node:<node>` in `system:nodes`, its kube-proxy `system:kube-proxy`."""
        assert self.ca is not None, "start() first"
        pair = self.ca.issue(common_name, organizations=organizations)
        user = {"client-certificate-data": _b64(pair.cert_pem), "client-key-data": _b64(pair.key_pem)}
        document = kubeconfig_document(self.server, self.ca_pem, user)
        return self._write(f"{name}.kubeconfig", yaml.safe_dump(document).encode(), True)

    def _wait_for_default_service_account(self, context: ssl.SSLContext, timeout: float) -> None:
        """The controller manager is up once it has made the default namespace's ServiceAccount (pods need it)."""
        url = f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait("kube-controller-manager", url, context, timeout)

    def stop(self) -> None:
        for component in ("kube-controller-manager", "kube-apiserver", "etcd"):
            process = self.processes.pop(component, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def describe(self) -> str:
        return json.dumps({"server": self.server, "kubeconfig": str(self.kubeconfig), "logs": str(self.work)})
