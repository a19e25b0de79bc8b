"""The node itself: pods run from images built here, reach each other, the API server and Services by
name, and nothing beyond this machine."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

from testbed.cluster.node import NFT_TABLE, NODE_IP, NODE_NAME, NodeCluster
from tests.node import pods


@pytest.fixture(scope="module")
def web(node: NodeCluster) -> Iterator[str]:
    """A namespace with a web server pod behind a Service, and a client pod to try things from."""
    ns = pods.namespace(node, "node-network")
    base = node.images["base"]
    pods.apply(
        node,
        pods.pod("web", ns, base, ["python3", "-m", "http.server", "8080", "--directory", "/etc"]),
        pods.pod("client", ns, base, ["sleep", "infinity"]),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    pods.wait_ready(node, ns, "app in (web, client)")
    pods.wait_served(node, ns, "web")
    yield ns
    node.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_node_is_ready_with_the_api_servers_release(node: NodeCluster) -> None:
    found = pods.get(node, "node", NODE_NAME)
    assert found["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert found["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.4.2"
    assert {"type": "InternalIP", "address": NODE_IP} in found["status"]["addresses"]


def test_pods_reach_each_other_and_the_api_server_by_name(node: NodeCluster, web: str) -> None:
    ns = web
    web_ip = pods.get(node, "pod", "web", "-n", ns)["status"]["podIP"]
    service_ip = pods.get(node, "service", "web", "-n", ns)["spec"]["clusterIP"]
    script = f"""
import json, socket, ssl, urllib.request
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
tls = ssl.create_default_context(cafile="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
api = urllib.request.Request("https://kubernetes.default.svc/version", headers={{"Authorization": "Bearer " + token}})
print(json.dumps({{
    "resolved": socket.gethostbyname("web.{ns}.svc.cluster.local"),
    "short": socket.gethostbyname("web"),
    "by_name": urllib.request.urlopen("http://web/hostname", timeout=10).read().decode().strip(),
    "by_pod_ip": urllib.request.urlopen("http://{web_ip}:8080/hostname", timeout=10).read().decode().strip(),
    "api": json.load(urllib.request.urlopen(api, context=tls, timeout=10))["gitVersion"],
}}))
"""
    done = pods.python_in(node, ns, "client", script)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"resolved": service_ip, "short": service_ip, "by_name": "web", "by_pod_ip": "web", "api": "v1.37.2"}


def test_this_machine_reaches_a_service_through_kube_proxy(node: NodeCluster, web: str) -> None:
    service_ip = pods.get(node, "service", "web", "-n", web)["spec"]["clusterIP"]
    with urllib.request.urlopen(f"http://{service_ip}/hostname", timeout=10) as answer:
        assert answer.read().decode().strip() == "web"


def _rejected_packets() -> int:
    table = subprocess.run(["nft", "-j", "list", "table", "inet", NFT_TABLE], capture_output=True, text=True, check=True)
    listed = json.loads(table.stdout)
    for item in listed["nftables"]:
        rule = item.get("rule")
        if rule and any("reject" in expression for expression in rule["expr"]):
            return sum(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
    raise AssertionError(f"no reject rule in table inet {NFT_TABLE}: {listed}")


def test_no_pod_reaches_beyond_this_machine(node: NodeCluster, web: str) -> None:
    """A pod has a default route (as any CNI gives it), yet the containment table rejects whatever it sends to
    another interface; this machine's own addresses it still reaches."""
    outside = socket.gethostbyname("pypi.org")
    host_address = subprocess.run(["ip", "-j", "route", "get", outside], capture_output=True, text=True, check=True)
    own = json.loads(host_address.stdout)[0]["prefsrc"]  # this machine's address on its way out
    assert node.node.plane is not None
    api_port = int(node.node.plane.server.rsplit(":", 1)[1])
    before = _rejected_packets()
    script = f"""
import socket
for target in ({outside!r}, {own!r}, {NODE_IP!r}):
    port = 443 if target == {outside!r} else {api_port}
    try:
        socket.create_connection((target, port), timeout=10).close()
        print(target, "reached")
    except OSError as failure:
        print(target, "refused", failure.errno)
"""
    done = pods.python_in(node, web, "client", script)
    assert done.returncode == 0, done.stderr
    outcome = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert outcome[outside].startswith("refused 113"), outcome  # EHOSTUNREACH: the table's reject, not a timeout
    assert outcome[own] == "refused 111", outcome  # this machine's stack answered (nothing listens there)
    assert outcome[NODE_IP] == "reached", outcome  # the node's own address (the API server listens there)
    assert _rejected_packets() > before
