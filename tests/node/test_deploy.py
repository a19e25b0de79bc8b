"""`deploy/` on a real node, end to end: installed by the steps docs/cluster.md gives, from the images this
run built from the checkout, then used, broken and upgraded as a platform team would, and removed.

The tests run in the order written (pytest keeps a module's order): one installation serves them all, and
the last one uninstalls it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.js.errors
import openai
import pytest
import yaml

from runtime.bus import Credentials, connect
from testbed.cluster.images import _pip_settings as pip_settings
from testbed.cluster.images import cache_root as cluster_images_store
from testbed.cluster.node import NodeCluster
from tests.node import pods
from tests.support import tiltfile
from tests.support.cli import ROOT

SYSTEM = "jetway-system"
BIN = Path(sys.executable).parent


@dataclass
class Installation:
    overlay: Path
    client_key: str = ""  # the key `jetway keys create` printed, once

    def env(self, cluster: NodeCluster) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{BIN}:{os.environ['PATH']}"}


def documented_install() -> list[str]:
    """The commands of docs/cluster.md's install section, as written (comments dropped)."""
    section = (ROOT / "docs" / "cluster.md").read_text().split("\n## Install", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def image_overlay(cluster: NodeCluster, folder: Path) -> Path:
    """A kustomization of deploy/ that only names the images this run pushed to the node's registry."""
    folder.mkdir(parents=True, exist_ok=True)
    registry = cluster.registry.host
    images = [
        {"name": "ghcr.io/jetway-dev/jetway", "newName": f"{registry}/jetway-test/jetway", "newTag": cluster.built.jetway.key},
        {"name": "nats", "newName": f"{registry}/jetway-test/nats", "newTag": cluster.built.nats.key},
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "deploy", folder)],
        "images": images,
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


def crashes(cluster: NodeCluster) -> str:
    """What the first container that restarted said before it ended, per Deployment: why an install did not come up."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "jetway-system", "-o", "json", check=False).stdout or "{}")
    said, seen = [], set()
    for pod in pods.get("items", []):
        owner = pod["metadata"]["name"].rsplit("-", 2)[0]
        restarted = any(s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses", []))
        if restarted and owner not in seen:
            seen.add(owner)
            logs = cluster.kubectl("logs", "-n", "jetway-system", pod["metadata"]["name"], "--previous", "--tail", "15", check=False)
            said.append(f"--- {pod['metadata']['name']}, before its last restart:\n{(logs.stdout + logs.stderr)[-1500:]}")
    return "\n" + "\n".join(said) if said else ""


def run_documented(cluster: NodeCluster, installation: Installation) -> None:
    for command in documented_install():
        if command.startswith("docker build"):
            # the session built this image with buildah from the same Dockerfile (testbed/cluster/images.py)
            assert "-f deploy/Dockerfile" in command, command
            continue
        if command.startswith(("kind load", "docker push")):
            continue  # the session pushed it to the node's registry
        if "examples/" in command:
            break  # the install is done: this is the docs' first deployment
        command = command.replace("kubectl apply -k deploy/", f"kubectl apply -k {installation.overlay}")
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=installation.env(cluster),
            timeout=400,
            check=False,
        )
        if done.returncode != 0:
            state = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
            raise AssertionError(
                f"{command!r} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}\n{state}{crashes(cluster)}"
            )
        found = re.search(r"key me: (jw-\S+)", done.stderr)
        if found:
            installation.client_key = found.group(1)


@pytest.fixture(scope="module")
def installed(node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    node.node.offer_volumes(3)  # NATS's three claims bind to these (a cluster's provisioner would make them)
    installation = Installation(image_overlay(node, tmp_path_factory.mktemp("overlay")))
    started = time.monotonic()
    run_documented(node, installation)
    print(f"\ndeploy/ installed and Available in {time.monotonic() - started:.0f} s", file=sys.stderr)
    yield installation


def service_address(cluster: NodeCluster, name: str, port: int, namespace: str = SYSTEM) -> str:
    found = pods.get(cluster, "service", name, "-n", namespace)
    return f"{found['spec']['clusterIP']}:{port}"


def http_json(url: str, timeout: float = 10, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def test_the_documented_install_brings_everything_up(node: NodeCluster, installed: Installation) -> None:
    deployments = pods.get(node, "deployments", "-n", SYSTEM)["items"]
    assert {d["metadata"]["name"] for d in deployments} == {
        f"jetway-{s}" for s in ("watcher", "selector", "storage", "workload", "gateway", "router", "binding", "console", "scaler")
    }
    for deployment in deployments:
        conditions = {c["type"]: c["status"] for c in deployment["status"]["conditions"]}
        assert conditions["Available"] == "True", deployment["metadata"]["name"]
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == node.images["jetway"]  # what this run built from the checkout
    # no container restarted on the way: the first real node saw services exit on NATS timeouts while the cluster
    # formed, and probes time out (the kubelet's 1 s default) while a service folded its stream
    restarted = {
        p["metadata"]["name"]: s["restartCount"]
        for p in pods.get(node, "pods", "-n", SYSTEM)["items"]
        for s in p["status"].get("containerStatuses", [])
        if s["restartCount"]
    }
    # a text, not a dict: pytest shortens a dict's repr to a few hundred characters, and the traceback is the point
    assert restarted == {}, "\n\n".join(f"{name} restarted {count}x:\n{previous_logs(node, name)}" for name, count in restarted.items())
    nats = pods.get(node, "statefulset", "jetway-nats", "-n", SYSTEM)
    assert nats["status"].get("readyReplicas") == 3
    claims = pods.get(node, "pvc", "-n", SYSTEM)["items"]
    assert sorted(c["status"]["phase"] for c in claims) == ["Bound"] * 3
    # every stream at three copies (the events, the dead letters, the leases, each service's snapshots), each copy
    # current once it has caught up: as each stream's leader sees it (every node's /jsz, its own streams)
    wait_for(lambda: not lagging_streams(node), 60, "every stream at three current copies", lambda: lagging_streams(node))
    # inside a service's pod: uid 10001, a read-only root, a writable /tmp, no ServiceAccount token where the
    # service needs no API access, and the cluster's DNS resolving NATS's Service
    selector = pods.get(node, "pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=jetway-selector")["items"][0]["metadata"]["name"]
    inside = pods.python_in(
        node,
        SYSTEM,
        selector,
        "import os, socket, tempfile\n"
        "print(os.getuid())\n"
        "try:\n    open('/app/written', 'w')\nexcept OSError as e:\n    print(e.errno)\n"
        "print(bool(tempfile.mkstemp(dir='/tmp')))\n"
        "print(os.path.exists('/var/run/secrets/kubernetes.io/serviceaccount/token'))\n"
        "print(socket.gethostbyname('jetway-nats'))",
    )
    uid, refused, tmp_writable, token, nats_ip = inside.stdout.split()
    assert (uid, refused, tmp_writable, token) == ("10001", "30", "True", "False"), inside.stdout  # 30: EROFS
    assert nats_ip == pods.get(node, "service", "jetway-nats", "-n", SYSTEM)["spec"]["clusterIP"]


def previous_logs(cluster: NodeCluster, pod: str, lines: int = 40) -> str:
    """Why a container restarted: its last state and the end of its previous log."""
    found = pods.get(cluster, "pod", pod, "-n", SYSTEM)
    last = [s.get("lastState") for s in found["status"].get("containerStatuses", [])]
    logs = cluster.kubectl("-n", SYSTEM, "logs", pod, "--previous", f"--tail={lines}", check=False)
    # the kubelet's side: a failed probe that restarted it says so here, not in the container's log
    events = cluster.kubectl("-n", SYSTEM, "get", "events", "--field-selector", f"involvedObject.name={pod}", check=False)
    return f"{last}\n{logs.stdout}{logs.stderr}\nevents:\n{events.stdout}{events.stderr}"


def nats_monitors(cluster: NodeCluster) -> dict[str, str]:
    """Each NATS node's monitoring address, by its server name (the pod's)."""
    found = pods.get(cluster, "pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=jetway-nats")["items"]
    return {p["metadata"]["name"]: f"{p['status']['podIP']}:8222" for p in found if p["status"].get("podIP")}


def led_streams(cluster: NodeCluster) -> dict[str, dict[str, Any]]:
    """Every stream as its leader reports it (a follower's view of the other copies is not the leader's)."""
    found: dict[str, dict[str, Any]] = {}
    for server, monitor in nats_monitors(cluster).items():
        with contextlib.suppress(OSError, ValueError):
            accounts = http_json(f"http://{monitor}/jsz?streams=true&config=true", timeout=5)["account_details"]
            for stream in (s for account in accounts for s in account.get("stream_detail", [])):
                if stream.get("cluster", {}).get("leader") == server:
                    found[stream["name"]] = stream
    return found


def lagging_streams(cluster: NodeCluster) -> list[str]:
    """The streams without three copies, a leader and two current followers (with what each has)."""
    streams = led_streams(cluster)
    names = {"JETWAY_EVENTS", "JETWAY_DLQ", "KV_jetway-leases", "OBJ_jetway-snapshots-router"}
    lagging = [f"{name}: no leader" for name in sorted(names - set(streams))]
    for name, stream in sorted(streams.items()):
        replicas = stream["cluster"].get("replicas", [])
        if stream["config"]["num_replicas"] != 3 or len(replicas) != 2 or not all(r["current"] for r in replicas):
            lagging.append(f"{name}: {stream['config']['num_replicas']} copies, followers {replicas}")
    return lagging


def test_the_console_serves_its_pages_through_port_forward(node: NodeCluster, installed: Installation) -> None:
    """As docs/console.md says: `kubectl port-forward svc/jetway-console`, then the user's own token."""
    from runtime.natsserver import free_port

    port = free_port()
    forward = subprocess.Popen(
        [str(BIN / "kubectl"), "-n", SYSTEM, "port-forward", "svc/jetway-console", f"{port}:8080"],
        env=installed.env(node),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        assert "Forwarding from" in forward.stdout.readline()
        token = node.kubectl("create", "token", "default", "-n", "default").stdout.strip()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/ui/", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200 and "<title>" in answer.read().decode()
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token: the login form, not the pages
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/kinds", timeout=30)
        assert refused.value.code == 401
    finally:
        forward.terminate()
        forward.wait(10)


def test_the_api_server_calls_the_webhook_through_its_service(node: NodeCluster, installed: Installation) -> None:
    bad = {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {"model": {"id": "PLACEHOLDER-model-id"}},
    }
    refused = node.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert refused.returncode != 0  # what the user sees: the field path and the rule
    assert 'The modeldeployments "bad" is invalid: spec.model.id:' in refused.stderr and "placeholder" in refused.stderr, refused.stderr
    # the API's own answer (kubectl's log of the response body) names who refused it: the webhook, for a rule the
    # CRD's own CEL rules do not hold
    raw = node.kubectl("create", "-v=8", "-f", "-", input=json.dumps(bad), check=False)
    assert 'admission webhook \\"validate.airunway.ai\\" denied the request' in raw.stderr, raw.stderr[-3000:]
    assert node.kubectl("get", "md", "bad", "-n", "default", check=False).returncode != 0  # nothing stored


SIMULATOR_NS = "sim"


def simulator_deployment(cluster: NodeCluster, name: str, served: str, namespace: str = SIMULATOR_NS) -> dict[str, Any]:
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"id": "Qwen/Qwen3-0.6B", "servedName": served},
            "provider": {"name": "vllm"},
            "engine": {"type": "vllm", "image": cluster.images["vllm-sim"], "contextLength": 4096},
            "resources": {"gpu": {"count": 1}},
        },
    }


def member_of(cluster: NodeCluster, served: str) -> dict[str, Any] | None:
    for member in pods.get(cluster, "inferencepoolmembers")["items"]:
        if any(m.get("name") == served for m in member["spec"].get("models", [])):
            found: dict[str, Any] = member
            return found
    return None


def wait_for(check: Any, timeout: float, message: str, describe: Any = None) -> Any:
    """The first truthy result of `check`; after `timeout`, an AssertionError with `describe()` (what is there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{message} not within {timeout:.0f} s: {describe() if describe else ''}")


@pytest.fixture(scope="module")
def simulator(node: NodeCluster, installed: Installation) -> str:
    """A Direct vLLM ModelDeployment of the simulator image, its member Healthy; the model name it serves."""
    node.node.advertise("nvidia.com/gpu", 8)  # what the NVIDIA device plugin would report: the render asks for one
    pods.namespace(node, SIMULATOR_NS)
    started = time.monotonic()
    pods.apply(node, simulator_deployment(node, "sim", "sim-model"))

    def healthy() -> bool:
        member = member_of(node, "sim-model")
        return bool(member and member.get("status", {}).get("phase") == "Healthy")

    wait_for(healthy, 240, "the simulator's InferencePoolMember Healthy")
    print(f"\nsimulator member Healthy {time.monotonic() - started:.1f} s after its ModelDeployment was applied", file=sys.stderr)
    router = service_address(node, "jetway-router", 8080)
    client = openai.OpenAI(base_url=f"http://{router}/v1", api_key=installed.client_key, max_retries=0, timeout=30)
    stream = client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True)
    first = next(chunk for chunk in stream if chunk.choices and chunk.choices[0].delta.content)
    print(f"its first token {time.monotonic() - started:.1f} s after it was applied: {first.choices[0].delta.content!r}", file=sys.stderr)
    stream.close()
    client.close()
    return "sim-model"


def chat(router: str, key: str, model: str, stream: bool = True, timeout: float = 30) -> tuple[int, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream, "max_tokens": 5}
    request = urllib.request.Request(
        f"http://{router}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, answer.read().decode()


def test_a_simulator_deployment_streams_a_chat_through_the_router_service(
    node: NodeCluster, installed: Installation, simulator: str
) -> None:
    md = pods.get(node, "md", "sim", "-n", SIMULATOR_NS)
    assert md["status"]["phase"] == "Running", md["status"]
    (pod,) = pods.get(node, "pods", "-n", SIMULATOR_NS)["items"]
    assert pod["spec"]["containers"][0]["image"] == node.images["vllm-sim"]
    router = service_address(node, "jetway-router", 8080)
    status, text = chat(router, installed.client_key, simulator)
    assert status == 200
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert content == "tok " * 5 and text.rstrip().endswith("data: [DONE]")


@dataclass
class Chats:
    """Chats sent one after another by a few clients until stopped: how many went, and every failure."""

    router: str
    key: str
    model: str
    max_tokens: int = 5  # the simulator answers "tok " this many times, 2 ms a token
    sent: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)

    def client(self) -> None:
        """The official OpenAI SDK, as an application uses it: one client, its connections kept alive; no retries,
        so that any request the rollout breaks is counted."""
        client = openai.OpenAI(base_url=f"http://{self.router}/v1", api_key=self.key, max_retries=0, timeout=30)
        while not self.stopping.is_set():
            try:
                stream = client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": "hello"}], max_tokens=self.max_tokens, stream=True
                )
                text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
                if text != "tok " * self.max_tokens:
                    self.failures.append(f"answered {text!r}")
            except openai.APIError as failure:
                self.failures.append(f"{type(failure).__name__}: {failure}")
            self.sent += 1
        client.close()

    @contextlib.contextmanager
    def running(self, clients: int = 4) -> Iterator[Chats]:
        threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self.stopping.set()
            for thread in threads:
                thread.join(60)


def router_pods(cluster: NodeCluster) -> set[str]:
    """The router's pods that are not terminating."""
    found = pods.get(cluster, "pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=jetway-router")["items"]
    return {p["metadata"]["name"] for p in found if not p["metadata"].get("deletionTimestamp")}


def test_a_rolling_update_of_the_router_fails_no_request(node: NodeCluster, installed: Installation, simulator: str) -> None:
    """`kubectl rollout restart` under a steady stream of chats through the router's Service: a new replica
    comes up before an old one stops, and a stopping one finishes what it has and takes nothing new."""
    router = service_address(node, "jetway-router", 8080)
    before = router_pods(node)
    with Chats(router, installed.client_key, simulator).running() as chats:
        wait_for(lambda: chats.sent >= 20, 60, "chats flowing before the update", lambda: chats.failures)
        started = time.monotonic()
        node.kubectl("-n", SYSTEM, "rollout", "restart", "deployment/jetway-router")
        node.kubectl("-n", SYSTEM, "rollout", "status", "deployment/jetway-router", "--timeout=300s", timeout=330)
        during = chats.sent
        wait_for(lambda: chats.sent >= during + 20, 60, "chats flowing after the update", lambda: chats.failures)
    after = router_pods(node)
    print(f"\nrouter rolled in {time.monotonic() - started:.0f} s under {chats.sent} chats, {len(chats.failures)} failed", file=sys.stderr)
    assert not before & after  # every replica replaced
    assert chats.failures == [], f"{len(chats.failures)} of {chats.sent} chats failed: {chats.failures[:5]}"


def autoscaled(cluster: NodeCluster, name: str, served: str, autoscaling: dict[str, Any], **spec: Any) -> dict[str, Any]:
    md = simulator_deployment(cluster, name, served)
    md["spec"]["scaling"] = {"replicas": 1, "autoscaling": autoscaling}
    md["spec"].update(spec)
    return md


def replica_counts(cluster: NodeCluster, name: str) -> tuple[int, int]:
    """The rendered Deployment's (spec.replicas, status.readyReplicas); (-1, -1) while it is not there."""
    found = cluster.kubectl("get", "deployment", name, "-n", SIMULATOR_NS, "-o", "json", check=False)
    if found.returncode != 0:
        return -1, -1
    deployment = json.loads(found.stdout)
    return deployment["spec"].get("replicas", 1), deployment.get("status", {}).get("readyReplicas", 0)


def scale_steps(cluster: NodeCluster, name: str) -> str:
    """What `jetway events` would say: the ModelDeployment's status and its Deployment's counts, for a failure."""
    md = cluster.kubectl("get", "md", name, "-n", SIMULATOR_NS, "-o", "json", check=False).stdout
    return f"replicas {replica_counts(cluster, name)}; md {md[-2000:]}"


def test_an_autoscaled_deployment_follows_a_load_step_up_to_3_and_back_to_1(
    node: NodeCluster, installed: Installation, simulator: str
) -> None:
    """The simulator runs one request at a time (`--max-num-seqs 1`), so 8 clients keep 7 waiting on one replica:
    at 2 waiting per replica the scaler asks for 4, bounded to 3; when the load stops, 3 are idle for the delay
    and it comes back to the minimum."""
    auto = autoscaled(
        node,
        "auto",
        "auto-model",
        {"minReplicas": 1, "maxReplicas": 3, "signal": "waitingPerReplica", "target": 2, "scaleDownDelaySeconds": 15},
        engine={**simulator_deployment(node, "auto", "auto-model")["spec"]["engine"], "args": {"max-num-seqs": "1"}},
    )
    pods.apply(node, auto)
    try:
        wait_for(lambda: replica_counts(node, "auto") == (1, 1), 240, "one replica Ready", lambda: scale_steps(node, "auto"))
        wait_for(lambda: (member_of(node, "auto-model") or {}).get("status", {}).get("phase") == "Healthy", 120, "auto's member Healthy")
        router = service_address(node, "jetway-router", 8080)
        with Chats(router, installed.client_key, "auto-model", max_tokens=100).running(clients=8) as chats:
            started = time.monotonic()
            wait_for(lambda: replica_counts(node, "auto") == (3, 3), 240, "3 replicas Ready under load", lambda: scale_steps(node, "auto"))
            up = time.monotonic() - started
        stopped = time.monotonic()
        wait_for(lambda: replica_counts(node, "auto")[0] == 1, 180, "back to 1 replica after the load", lambda: scale_steps(node, "auto"))
        down = time.monotonic() - stopped
        print(
            f"\nautoscaled: 1 -> 3 Ready {up:.1f} s after 8 clients started; back to 1 {down:.1f} s after they stopped "
            f"(delay 15 s); {chats.sent} chats, {len(chats.failures)} failed",
            file=sys.stderr,
        )
        assert chats.failures == [], f"{len(chats.failures)} of {chats.sent} chats failed: {chats.failures[:5]}"
        # every step is explained on the record: `jetway events` shows the scaler's decisions with their signal
        history = recorded_events(node, "md/auto")
        assert "ScaleDecided" in history and "waitingPerReplica" in history, history[-3000:]
    finally:
        node.kubectl("delete", "md", "auto", "-n", SIMULATOR_NS, "--wait=false", check=False)


def test_a_deployment_at_zero_holds_the_first_request_and_answers_it(node: NodeCluster, installed: Installation, simulator: str) -> None:
    """Minimum 0: idle, it goes to no pod at all; a streamed chat then is held by the router, the scaler scales to
    one on the demand, and the chat is answered from the new pod."""
    pods.apply(node, autoscaled(node, "zero", "zero-model", {"minReplicas": 0, "maxReplicas": 1, "scaleDownDelaySeconds": 5}))
    try:
        wait_for(lambda: member_of(node, "zero-model") is not None, 240, "zero's member recorded", lambda: scale_steps(node, "zero"))
        wait_for(lambda: replica_counts(node, "zero") == (0, 0), 240, "scaled to zero while idle", lambda: scale_steps(node, "zero"))
        wait_for(lambda: not pods.get(node, "pods", "-n", SIMULATOR_NS, "-l", "app=zero")["items"], 120, "zero's pod gone")
        member = member_of(node, "zero-model")
        assert member is not None and member["metadata"]["labels"].get("jetway.dev/scale-from-zero"), member
        router = service_address(node, "jetway-router", 8080)
        client = openai.OpenAI(base_url=f"http://{router}/v1", api_key=installed.client_key, max_retries=0, timeout=180)
        started = time.monotonic()
        stream = client.chat.completions.create(
            model="zero-model", messages=[{"role": "user", "content": "hello"}], max_tokens=3, stream=True
        )
        text, first = "", None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.monotonic() - started
                text += chunk.choices[0].delta.content
        client.close()
        assert text == "tok " * 3
        assert first is not None
        print(f"\nfrom zero: the first request's first token {first:.1f} s after it was sent", file=sys.stderr)
        assert replica_counts(node, "zero")[0] == 1
    finally:
        node.kubectl("delete", "md", "zero", "-n", SIMULATOR_NS, "--wait=false", check=False)


BURST_NS = "burst"
BURST = 50  # deployments; each applied ten times in the first burst (500 applies), four more in the second (200)
SERVICES = ("watcher", "selector", "storage", "workload", "gateway", "router", "binding", "console")


def burst_deployment(cluster: NodeCluster, index: int, round_: int) -> dict[str, Any]:
    """A simulator deployment whose pod can never be scheduled (a node selector no node has): Jetway renders it
    whole, and the node runs none of them. Each round changes its environment, so each apply is a new render."""
    document = simulator_deployment(cluster, f"md-{index:03d}", f"model-{index:03d}", BURST_NS)
    document["spec"]["nodeSelector"] = {"jetway.dev/test-node": "none"}
    document["spec"]["env"] = [{"name": "APPLY_ROUND", "value": str(round_)}]
    return document


def apply_rounds(cluster: NodeCluster, rounds: range, progress: list[int], batch: int = 25) -> int:
    """Every burst deployment applied once per round, server-side, in batches; each batch retried until taken (an
    API server whose webhook pod was just killed refuses it: failurePolicy Fail). How many batches were sent again."""
    retried = 0
    for round_ in rounds:
        for start in range(0, BURST, batch):
            text = yaml.safe_dump_all([burst_deployment(cluster, i, round_) for i in range(start, min(start + batch, BURST))])
            deadline = time.monotonic() + 120
            while True:
                done = cluster.kubectl("apply", "--server-side", "-f", "-", input=text, check=False, timeout=180)
                if done.returncode == 0:
                    break
                retried += 1
                assert time.monotonic() < deadline, f"a batch was refused for 2 minutes: {done.stderr[-2000:]}"
                time.sleep(1)
            progress.append(min(start + batch, BURST))
    return retried


def unrendered(cluster: NodeCluster, round_: int) -> list[str]:
    """The burst deployments whose last apply is not in the cluster yet: each one's Deployment (with that round's
    environment) and Service, owned by it."""
    rendered: dict[str, set[str]] = {}
    for kind in ("deployments", "services"):
        for item in pods.get(cluster, kind, "-n", BURST_NS)["items"]:
            owner = next((o["name"] for o in item["metadata"].get("ownerReferences", []) if o["kind"] == "ModelDeployment"), None)
            if owner is None:
                continue
            if kind == "deployments":
                env = item["spec"]["template"]["spec"]["containers"][0].get("env", [])
                if {"name": "APPLY_ROUND", "value": str(round_)} not in env:
                    continue
            rendered.setdefault(owner, set()).add(kind)
    return sorted(f"md-{i:03d}" for i in range(BURST) if rendered.get(f"md-{i:03d}") != {"deployments", "services"})


def settled(cluster: NodeCluster, round_: int, timeout: float = 600) -> None:
    """Every burst deployment rendered as last applied, and the event stream replaying to exactly what the API
    server holds (nothing lost, nothing extra)."""
    wait_for(lambda: not unrendered(cluster, round_), timeout, "every deployment rendered", lambda: unrendered(cluster, round_)[:10])
    assert len(stored(cluster, BURST_NS)) == BURST
    wait_for(lambda: replayed(cluster, BURST_NS) == stored(cluster, BURST_NS), 60, "replay equal to get")


def nats_password(cluster: NodeCluster, user: str) -> str:
    secret = pods.get(cluster, "secret", "jetway-nats-users", "-n", SYSTEM)
    return base64.b64decode(secret["data"][user]).decode()


def lease_holders(cluster: NodeCluster) -> dict[str, str]:
    """Every lease in the bucket (`<group>.lease.<partition>`) and the replica holding it, read as the console's
    NATS user (every service may read the bucket)."""
    url = f"nats://{service_address(cluster, 'jetway-nats', 4222)}"
    credentials = Credentials("console", nats_password(cluster, "console"))

    async def read() -> dict[str, str] | None:
        nc = await connect(url, name="node-test", credentials=credentials)
        try:
            kv = await nc.jetstream().key_value("jetway-leases")
            try:
                keys = await kv.keys()
            except nats.js.errors.NoKeysError:
                # nats-py's keys() ends at once when the server pushed every key before it asked how many were
                # pending (the flaw Leases.read works around): no answer, not an empty bucket
                return None
            found = {}
            for key in [k for k in keys if ".lease." in k]:  # nats-py's filters match substrings, not wildcards
                with contextlib.suppress(nats.js.errors.KeyNotFoundError):
                    entry = await kv.get(key)
                    found[key] = (entry.value or b"").decode()
            return found
        finally:
            await nc.close()

    def attempt() -> tuple[dict[str, str]] | None:
        found = asyncio.run(read())
        return None if found is None else (found,)  # truthy even when no lease is held

    answered: tuple[dict[str, str]] = wait_for(attempt, 60, "the lease bucket read")
    return answered[0]


def taken_over(cluster: NodeCluster, victim: str, held: dict[str, str]) -> bool:
    """Whether every lease the victim held is held by another replica now."""
    now = lease_holders(cluster)
    return all(now.get(key) not in (None, victim) for key, holder in held.items() if holder == victim)


def replayed(cluster: NodeCluster, namespace: str) -> dict[str, Any]:
    """What the event stream says each deployment of the namespace is (`jetway replay`, read as the console's NATS
    user from this machine), by name."""
    password = nats_password(cluster, "console")
    nats = service_address(cluster, "jetway-nats", 4222)
    done = subprocess.run(
        [str(BIN / "jetway"), "replay", "md", "-n", namespace, "--nats", f"nats://{nats}", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JETWAY_NATS_USER": "console", "JETWAY_NATS_PASSWORD": password},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert password not in done.stdout + done.stderr
    manifests = json.loads(done.stdout.split("\n", 1)[1])  # after the "# state as of" line
    return {m["metadata"]["name"]: m["spec"] for m in manifests if m["metadata"].get("namespace") == namespace}


def recorded_events(cluster: NodeCluster, ref: str, namespace: str = SIMULATOR_NS) -> str:
    """`jetway events REF` as the console's NATS user from this machine."""
    password = nats_password(cluster, "console")
    nats = service_address(cluster, "jetway-nats", 4222)
    done = subprocess.run(
        [str(BIN / "jetway"), "events", ref, "-n", namespace, "--nats", f"nats://{nats}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JETWAY_NATS_USER": "console", "JETWAY_NATS_PASSWORD": password},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert password not in done.stdout + done.stderr
    return done.stdout


def stored(cluster: NodeCluster, namespace: str) -> dict[str, Any]:
    return {m["metadata"]["name"]: m["spec"] for m in pods.get(cluster, "md", "-n", namespace)["items"]}


def test_service_pods_killed_during_500_applies_lose_nothing(node: NodeCluster, installed: Installation) -> None:
    """One pod of every service force-deleted (`--grace-period=0 --force`) while 50 ModelDeployments are applied
    ten times each: every one is rendered as last applied, and the event stream replays to what the API server
    holds. How long each killed pod's leases had no holder is measured."""
    pods.namespace(node, BURST_NS)
    started = time.monotonic()
    progress: list[int] = []
    result: dict[str, int] = {}
    applier = threading.Thread(target=lambda: result.update(retried=apply_rounds(node, range(10), progress)), daemon=True)
    applier.start()
    takeovers: dict[str, float] = {}
    for number, service in enumerate(SERVICES, start=1):
        wait_for(lambda number=number: len(progress) >= number * 2 or not applier.is_alive(), 300, "applies going on")
        (victim, *_) = [
            p["metadata"]["name"] for p in pods.get(node, "pods", "-n", SYSTEM, "-l", f"app.kubernetes.io/name=jetway-{service}")["items"]
        ]
        held = lease_holders(node)
        deleted = time.monotonic()
        node.kubectl("-n", SYSTEM, "delete", "pod", victim, "--grace-period=0", "--force")
        if victim in held.values():  # measured, not asserted: how long its partitions had no holder
            wait_for(lambda victim=victim, held=held: taken_over(node, victim, held), 120, f"{victim}'s leases taken over")
            takeovers[service] = time.monotonic() - deleted
    applier.join(900)
    assert not applier.is_alive()
    settled(node, 9)
    took = time.monotonic() - started
    print(
        f"\n500 applies rendered in {took:.0f} s, {len(SERVICES)} pods killed, {result.get('retried')} batches sent again", file=sys.stderr
    )
    print(f"leases taken over after a force-deleted pod, s: { {k: round(v, 1) for k, v in takeovers.items()} }", file=sys.stderr)


def test_a_nats_pod_deleted_during_a_burst_loses_nothing_and_rejoins(node: NodeCluster, installed: Installation) -> None:
    """The node leading the event stream is deleted (its preStop lame duck moves the clients away) while the 50
    deployments are applied four more times: the writes go on over the other two, nothing is lost, and the pod
    comes back with its volume and catches up."""
    progress: list[int] = []
    applier = threading.Thread(target=lambda: apply_rounds(node, range(10, 14), progress), daemon=True)
    applier.start()
    wait_for(lambda: len(progress) >= 2, 300, "applies going on")
    victim = led_streams(node)["JETWAY_EVENTS"]["cluster"]["leader"]
    uid = pods.get(node, "pod", victim, "-n", SYSTEM)["metadata"]["uid"]
    started = time.monotonic()
    node.kubectl("-n", SYSTEM, "delete", "pod", victim, "--wait=false")
    applier.join(900)
    assert not applier.is_alive()
    settled(node, 13)

    def rejoined() -> bool:
        found = pods.get(node, "pod", victim, "-n", SYSTEM)
        ready = {c["type"]: c["status"] for c in found["status"].get("conditions", [])}.get("Ready") == "True"
        return found["metadata"]["uid"] != uid and ready

    wait_for(rejoined, 300, f"{victim} back and Ready")
    wait_for(lambda: not lagging_streams(node), 120, "every stream at three current copies", lambda: lagging_streams(node))
    took = time.monotonic() - started
    print(f"\n{victim} (the event stream's leader) deleted mid-burst: back and current in {took:.0f} s", file=sys.stderr)


def test_the_tilt_stack_builds_applies_and_live_updates(node: NodeCluster, installed: Installation, tmp_path: Path) -> None:
    """What tilt/Tiltfile declares, carried out on the node as `tilt up` would (Tilt itself is not served by any
    registry here; docs/cluster.md): its custom_build command with the daemonless builder, pushed to the registry
    default_registry names; its YAML applied with that image; a source file synced into a running service, which
    restarts itself with it."""
    storage = tmp_path / "storage.conf"  # the node's build store, where the base image is
    store = cluster_images_store()
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{store / "storage"}"\nrunroot = "{store / "run"}"\n')
    flags = f"--isolation chroot --build-arg BASE={node.built.base.local} {' '.join(pip_settings(tmp_path))}"
    env = {"JETWAY_IMAGE_BUILDER": "buildah", "JETWAY_REGISTRY": node.registry.host, "JETWAY_BUILD_FLAGS": flags}
    tilt = tiltfile.load(env)
    (build,) = tilt.builds
    # Tilt's name for the image under default_registry (slashes escaped), and a tag of its own
    expected = f"{tilt.registry}/{build.ref.replace('/', '_')}:tilt-{uuid.uuid4().hex[:16]}"
    built = subprocess.run(
        ["sh", "-c", build.command],
        cwd=build.folder,
        env={**os.environ, "EXPECTED_REF": expected, "CONTAINERS_STORAGE_CONF": str(storage)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]

    def as_tilt_applies(document: dict[str, Any]) -> dict[str, Any]:
        """Tilt puts the image it built in place of the one the Tiltfile names; the NATS image is this node's."""
        for container in document.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container["image"].startswith(build.ref):
                container["image"] = expected
            elif container["image"].startswith("nats:"):
                container["image"] = node.images["nats"]
        return document

    # the Secret of NATS passwords the install made stands (a new one would lock every service out of NATS)
    documents = [as_tilt_applies(d) for d in tilt.objects if not (d["kind"] == "Secret" and d["metadata"]["name"] == "jetway-nats-users")]
    pods.apply(node, *documents)
    for deployment in pods.get(node, "deployments", "-n", SYSTEM)["items"]:
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == expected, deployment["metadata"]["name"]
    # the kubelet runs what Tilt built: shown on the service the live update changes (the others roll on beside it;
    # waiting for all eight on two cores is minutes the suite cannot spare)
    node.kubectl("-n", SYSTEM, "rollout", "status", "deployment/jetway-selector", "--timeout=300s", timeout=330)

    # live update: the sync that covers a changed file puts it in the container with tar through exec, as Tilt does
    changed = ROOT / "services" / "selector" / "__init__.py"
    local, remote = next((local, remote) for local, remote in build.syncs if local in changed.parents)
    token = uuid.uuid4().hex
    mark = f"LIVE_UPDATE_MARK = {token!r}\n"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        content = changed.read_bytes() + b"\n" + mark.encode()
        info = tarfile.TarInfo((remote + "/" + str(changed.relative_to(local))).lstrip("/"))
        info.size, info.mtime, info.mode = len(content), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(content))
    (target, *_) = sorted(
        p["metadata"]["name"]
        for p in pods.get(node, "pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=jetway-selector")["items"]
        if not p["metadata"].get("deletionTimestamp")
    )
    synced = subprocess.run(
        [str(BIN / "kubectl"), "-n", SYSTEM, "exec", "-i", target, "--", "tar", "-C", "/", "-x", "-f", "-"],
        input=archive.getvalue(),
        capture_output=True,
        env=installed.env(node),
        timeout=60,
        check=False,
    )
    assert synced.returncode == 0, synced.stderr.decode()[-2000:]
    wait_for(lambda: "sources changed: restarting" in node.kubectl("-n", SYSTEM, "logs", target).stdout, 60, "the service restarting")
    # the pod the file went into, Ready again (not every pod of the label: the rollout's old ones may still be draining)
    node.kubectl("-n", SYSTEM, "wait", "--for=condition=Ready", f"pod/{target}", "--timeout=180s", timeout=210)
    running = pods.python_in(node, SYSTEM, target, "import services.selector as s; print(s.LIVE_UPDATE_MARK)")
    assert (
        running.stdout.strip() == repr(mark.split(" = ")[1].strip()).strip("'\"")
        or mark.split(" = ")[1].strip().strip("'") in running.stdout
    )
    found = pods.get(node, "pod", target, "-n", SYSTEM)
    assert found["status"]["containerStatuses"][0]["restartCount"] == 0  # the process restarted itself, not the kubelet


def test_uninstalling_leaves_nothing_behind(node: NodeCluster, installed: Installation) -> None:
    """As docs/cluster.md says: the custom resources first (Jetway cleans up and removes its finalizer), then
    `kubectl delete -k deploy/`."""
    started = time.monotonic()
    node.kubectl("delete", "md", "--all", "--all-namespaces", "--wait=true", timeout=900)
    node.kubectl("delete", "-k", str(installed.overlay), "--wait=true", timeout=600)
    took = time.monotonic() - started
    assert node.kubectl("get", "namespace", SYSTEM, check=False).returncode != 0
    crds = pods.get(node, "crd")["items"]
    assert not [c["metadata"]["name"] for c in crds if c["spec"]["group"] in ("airunway.ai", "airdress.co")]
    for kind in ("clusterroles", "clusterrolebindings", "validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        left = pods.get(node, kind, "-l", "app.kubernetes.io/part-of=jetway")["items"]
        assert not left, (kind, [o["metadata"]["name"] for o in left])
    for kind in ("deployments", "services", "configmaps", "secrets", "jobs", "persistentvolumeclaims"):
        left = pods.get(node, kind, "--all-namespaces", "-l", "app.kubernetes.io/managed-by=jetway")["items"]
        assert not left, (kind, [o["metadata"]["name"] for o in left])
    print(f"\nuninstalled in {took:.0f} s", file=sys.stderr)
