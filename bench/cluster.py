"""How fast Jetway, as a Kubernetes controller, turns created ModelDeployments into workloads.

    .venv/bin/python -m bench.cluster [--sizes 50,200,500] [--json FILE]

For each size N, on the test suite's API emulator (real HTTP on 127.0.0.1) and a fresh NATS:
the watcher, selector, storage and workload services run in cluster mode; N ModelDeployments
are created through the API (64 in flight), and the clock stops when every one shows phase
`Deploying` in its status, that is when its PVC, download Job, Deployment and Service exist
and its status has been written back. The baseline, measured in the same run against the same
emulator, is the floor any controller pays: the same writes made directly with the same
client (4 objects and 1 status patch per deployment, 64 in flight), no decisions, no events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime.kube import Kube
from runtime.natsserver import NatsServer
from tests.support.cluster import Cluster
from tests.support.controller import running_controller
from tests.support.kubeemu import KubeEmulator

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


async def deploying(kube: Kube, namespace: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        items, _ = await kube.list(MDV, "ModelDeployment", namespace)
        done = sum(1 for md in items if (md.get("status") or {}).get("phase") == "Deploying")
        if done >= n:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {done} of {n} deploying")
        await asyncio.sleep(0.25)  # polling shares the core with what it measures: not too often


async def jetway(n: int) -> float:
    emulator = await KubeEmulator(bookmark_interval=1.0, history_limit=50 * n + 5000).start()
    server = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-bench-cluster-"))).start()
    kube = Kube.at(emulator.url)
    await kube.discover()
    cluster = Cluster(kube, "bench", emulator)
    try:
        async with running_controller(server.url, cluster, resync=30.0):  # as deployed
            started = time.perf_counter()
            await in_batches(n, lambda i: kube.create(manifest(i, "bench")))
            await deploying(kube, "bench", n, timeout=900)
            return time.perf_counter() - started
    finally:
        await kube.close()
        await emulator.stop()
        server.stop()


async def floor(n: int, objects: list[dict[str, Any]]) -> float:
    """The same writes, made directly: create the deployment, its four objects, patch its status."""
    emulator = await KubeEmulator(bookmark_interval=1.0).start()
    kube = Kube.at(emulator.url)
    await kube.discover()
    await Cluster(kube, "floor", emulator).install_crds()
    try:
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
        return time.perf_counter() - started
    finally:
        await kube.close()
        await emulator.stop()


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


async def main(sizes: list[int]) -> dict[str, Any]:
    objects = objects_of_one()
    rows = []
    for n in sizes:
        ours = await jetway(n)
        direct = await floor(n, objects)
        rows.append(
            {
                "deployments": n,
                "seconds": round(ours, 2),
                "per_second": round(n / ours, 1),
                "floor_seconds": round(direct, 2),
                "ratio_to_floor": round(ours / direct, 2),
            }
        )
    print(f"{'deployments':>12}{'seconds':>9}{'per s':>8}{'floor s':>9}{'x floor':>9}")
    for row in rows:
        print(f"{row['deployments']:>12,}{row['seconds']:>9}{row['per_second']:>8}{row['floor_seconds']:>9}{row['ratio_to_floor']:>9}")
    return {"objects_per_deployment": len(objects), "bursts": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,200,500")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = asyncio.run(main([int(s) for s in options.sizes.split(",")]))
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
