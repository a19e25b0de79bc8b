"""How fast Jetway, as a Kubernetes controller, turns created ModelDeployments into workloads, on the
test suite's API emulator and on a real control plane (kube-apiserver, etcd, kube-controller-manager
built from their Go modules by tests/cluster/), side by side in one run.

    .venv/bin/python -m bench.cluster [--sizes 50,200,500] [--servers emulator,real] [--json FILE]

For each server and size N, on a fresh server and a fresh NATS: the watcher, selector, storage and
workload services run in cluster mode; N ModelDeployments are created through the API (64 in
flight), and the clock stops when every one shows phase `Deploying` in its status, that is when its
PVC, download Job, Deployment and Service exist and its status has been written back. The baseline,
measured in the same run against a fresh server of the same kind, is the floor any controller pays:
the same writes made directly with the same client (4 objects and 1 status patch per deployment,
64 in flight), no decisions, no events.

Besides the time: status writes and API requests per deployment, counted by the server (the
emulator's counter; the real API server's `apiserver_request_total`, less what its own controllers
and the benchmark's polling sent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.kube import Kube
from runtime.natsserver import NatsServer
from testbed.controller import running_controller
from testbed.kubeapi import Cluster
from testbed.kubeemu import KubeEmulator

Calls = Counter[tuple[str, str, str]]  # (verb, resource, subresource) → requests
# what the real server's own controllers and admission plugins ask for (ReplicaSets, pods, events, leases,
# a Service's IPAddress, the LimitRanger's lists, non-resource paths such as /openapi): not Jetway's requests
NOT_OURS = {
    "",
    "replicasets",
    "pods",
    "events",
    "leases",
    "endpointslices",
    "endpoints",
    "serviceaccounts",
    "secrets",
    "configmaps",
    "limitranges",
    "resourcequotas",
    "ipaddresses",
    "servicecidrs",
}
MDV = "airunway.ai/v1alpha1"


def manifest(i: int, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": MDV,
        "kind": "ModelDeployment",
        "metadata": {"name": f"m{i}", "namespace": namespace},
        "spec": {
            "model": {"id": "Qwen/Qwen3-0.6B", "storage": {"volumes": [{"name": "cache", "purpose": "modelCache", "size": "20Gi"}]}},
            "engine": {"type": "vllm"},
            "provider": {"name": "vllm"},
        },
    }


async def in_batches(n: int, make: Any) -> None:
    for start in range(0, n, 64):
        await asyncio.gather(*(make(i) for i in range(start, min(start + 64, n))))


async def deploying(kube: Kube, namespace: str, n: int, timeout: float) -> int:
    """Wait until all `n` show Deploying; the number of lists it took (the server counted them too)."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        items, _ = await kube.list(MDV, "ModelDeployment", namespace)
        polls += 1
        done = sum(1 for md in items if (md.get("status") or {}).get("phase") == "Deploying")
        if done >= n:
            return polls
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {done} of {n} deploying")
        await asyncio.sleep(0.25)  # polling shares the cores with what it measures: not too often


@dataclass
class Server:
    """A fresh API server of one kind, and how to read the requests it has answered so far."""

    cluster: Cluster
    calls: Callable[[], Any]  # an awaitable of Calls


def _emulator_calls(emulator: KubeEmulator) -> Callable[[], Any]:
    async def read() -> Calls:
        return Counter(emulator.calls)

    return read


SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def _labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


def _real_calls(kube: Kube) -> Callable[[], Any]:
    async def read() -> Calls:
        response = await kube.api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
        text = (await response.read()).decode()
        found: Calls = Counter()
        for line in text.splitlines():
            matched = SAMPLE.match(line)
            if matched:
                labels = _labels(matched["labels"])
                verb = "PATCH" if labels["verb"] == "APPLY" else labels["verb"]  # server-side apply is a PATCH on the wire
                found[(verb, labels["resource"], labels.get("subresource", ""))] += int(float(matched["value"]))
        return found

    return read


@contextlib.asynccontextmanager
async def fresh(kind: str, namespace: str, bin_dir: Path | None) -> AsyncIterator[Server]:
    if kind == "emulator":
        emulator = await KubeEmulator(bookmark_interval=1.0, history_limit=100_000).start()
        kube = Kube.at(emulator.url)
        await kube.discover()
        try:
            yield Server(Cluster(kube, namespace, emulator), _emulator_calls(emulator))
        finally:
            await kube.close()
            await emulator.stop()
        return
    from testbed.cluster.controlplane import ControlPlane
    from testbed.kubeapi import RealServer

    assert bin_dir is not None
    plane = await asyncio.to_thread(ControlPlane(bin_dir).start)
    kube = await Kube.connect(str(plane.kubeconfig))
    try:
        await kube.discover()
        await kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        yield Server(Cluster(kube, namespace, None, RealServer(str(plane.kubeconfig), owned=True)), _real_calls(kube))
    finally:
        await kube.close()
        await asyncio.to_thread(plane.stop)  # the whole server goes: nothing to clean up object by object


def _theirs(verb: str, resource: str, subresource: str) -> bool:
    """A request the real server's controllers made: Jetway writes Deployments and Jobs only by apply (a
    PATCH), never their status; the Deployment controller PUTs its revision annotation and status."""
    return resource in NOT_OURS or (resource in ("deployments", "jobs") and (bool(subresource) or verb == "PUT"))


def per_deployment(calls: Calls, n: int, polls: int) -> dict[str, Any]:
    ours = {key: count for key, count in calls.items() if not _theirs(*key)}
    ours[("LIST", "modeldeployments", "")] = ours.get(("LIST", "modeldeployments", ""), 0) - polls  # the benchmark's own polling
    ours[("POST", "modeldeployments", "")] = ours.get(("POST", "modeldeployments", ""), 0) - n  # the benchmark's own creates
    status = sum(
        count for (verb, resource, sub), count in ours.items() if resource == "modeldeployments" and sub == "status" and verb != "GET"
    )
    by_request = {" ".join(filter(None, key)): round(count / n, 2) for key, count in sorted(ours.items(), key=lambda kv: -kv[1]) if count}
    return {"status_writes": round(status / n, 1), "api_requests": round(sum(ours.values()) / n, 1), "by_request": by_request}


async def jetway(kind: str, n: int, bin_dir: Path | None) -> tuple[float, dict[str, Any]]:
    nats = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-bench-cluster-"))).start()
    try:
        async with fresh(kind, "bench", bin_dir) as server:
            kube = server.cluster.kube
            async with running_controller(nats.url, server.cluster, resync=30.0, clean_up=False):  # resync as deployed
                before = await server.calls()
                started = time.perf_counter()
                await in_batches(n, lambda i: kube.create(manifest(i, "bench")))
                polls = await deploying(kube, "bench", n, timeout=900)
                elapsed = time.perf_counter() - started
                after = await server.calls()
            return elapsed, per_deployment(after - before, n, polls)
    finally:
        nats.stop()


async def floor(kind: str, n: int, objects: list[dict[str, Any]], bin_dir: Path | None) -> tuple[float, dict[str, Any]]:
    """The same writes, made directly: create the deployment, its four objects, patch its status."""
    async with fresh(kind, "floor", bin_dir) as server:
        kube = server.cluster.kube
        await server.cluster.install_crds()
        before = await server.calls()
        started = time.perf_counter()

        async def one(i: int) -> None:
            md = await kube.create(manifest(i, "floor"))
            for template in objects:
                obj = json.loads(json.dumps(template).replace('"qwen', f'"m{i}'))
                obj["metadata"]["namespace"] = "floor"
                obj["metadata"]["ownerReferences"] = [
                    {"apiVersion": MDV, "kind": "ModelDeployment", "name": f"m{i}", "uid": md["metadata"]["uid"], "controller": True}
                ]
                await kube.apply(obj, manager="floor")
            await kube.apply(
                {
                    "apiVersion": MDV,
                    "kind": "ModelDeployment",
                    "metadata": {"name": f"m{i}", "namespace": "floor"},
                    "status": {"phase": "Deploying"},
                },
                manager="floor",
                subresource="status",
            )

        await in_batches(n, one)
        elapsed = time.perf_counter() - started
        return elapsed, per_deployment(await server.calls() - before, n, 0)


def objects_of_one() -> list[dict[str, Any]]:
    from cli.render import objects_for
    from contracts.admission import admit
    from contracts.modeldeployment import ModelDeployment
    from contracts.providerconfig import InferenceProviderConfigSpec
    from services.selector.decide import Provider
    from services.workload.providers import builtin_configs

    verdict = admit({**manifest(0, "floor"), "metadata": {"name": "qwen", "namespace": "floor"}})
    assert isinstance(verdict.obj, ModelDeployment)
    providers = [Provider(c["metadata"]["name"], InferenceProviderConfigSpec.model_validate(c["spec"]), True) for c in builtin_configs()]
    objects, _ = objects_for(verdict.obj, "uid", providers)
    return objects


async def main(sizes: list[int], servers: list[str]) -> dict[str, Any]:
    objects = objects_of_one()
    bin_dir = None
    if "real" in servers:
        from testbed.cluster.build import BuildFailed, build

        try:
            bin_dir = build()
        except BuildFailed as failed:
            print(f"no real control plane ({failed}): measuring the emulator only")
            servers = [s for s in servers if s != "real"]
    rows = []
    for n in sizes:
        for kind in servers:
            ours, counted = await jetway(kind, n, bin_dir)
            direct, floor_counted = await floor(kind, n, objects, bin_dir)
            rows.append(
                {
                    "server": kind,
                    "deployments": n,
                    "seconds": round(ours, 2),
                    "per_second": round(n / ours, 1),
                    "floor_seconds": round(direct, 2),
                    "ratio_to_floor": round(ours / direct, 2),
                    "status_writes_per_deployment": counted["status_writes"],
                    "api_requests_per_deployment": counted["api_requests"],
                    "floor_api_requests_per_deployment": floor_counted["api_requests"],
                    "requests_per_deployment_by_kind": counted["by_request"],  # where req/d goes (issue 24 #7)
                }
            )
    print(
        f"{'server':>9}{'deployments':>12}{'seconds':>9}{'per s':>8}{'floor s':>9}{'x floor':>9}"
        + f"{'status/d':>10}{'req/d':>8}{'floor req/d':>12}"
    )
    for row in rows:
        print(
            f"{row['server']:>9}{row['deployments']:>12,}{row['seconds']:>9}{row['per_second']:>8}{row['floor_seconds']:>9}"
            f"{row['ratio_to_floor']:>9}{row['status_writes_per_deployment']:>10}{row['api_requests_per_deployment']:>8}"
            f"{row['floor_api_requests_per_deployment']:>12}"
        )
    print("\nJetway's requests per deployment, by verb, resource and subresource (the largest first):")
    for row in rows:
        kinds = ", ".join(f"{k} {v}" for k, v in list(row["requests_per_deployment_by_kind"].items())[:8])
        print(f"{row['server']:>9}{row['deployments']:>12,}  {kinds}")
    return {"objects_per_deployment": len(objects), "bursts": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,200,500")
    parser.add_argument("--servers", default="emulator,real", help="emulator, real (the test control plane), or both")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = asyncio.run(main([int(s) for s in options.sizes.split(",")], options.servers.split(",")))
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
