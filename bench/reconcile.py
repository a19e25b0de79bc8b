"""How fast the ModelDeployment pipeline turns a burst of deployments into rendered objects.

    .venv/bin/python -m bench.reconcile [--sizes 100,1000,5000] [--json FILE]

For each size N, on a fresh NATS store: the selector, storage and workload services run (as
in `jetway up`), N ModelDeployments are appended at once (64 in flight), and the clock stops
when the workload service has rendered all N. Each deployment costs four stored events
(applied, selected, storage planned, rendered), so the baseline, measured in the same run,
is raw nats-py publishing 4·N events with 64 in flight: the floor set by JetStream alone.
Also: the same burst of 1,000 sent through the apply API (HTTP, admission included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from contracts.events import ResourceApplied, encode, new_envelope
from contracts.subjects import Key
from runtime.bus import EVENTS_STREAM, connect, ensure_streams
from runtime.entry import Context
from runtime.eventstore import EventStore
from runtime.natsserver import NatsServer
from runtime.service import Runner
from services import catalog
from services.console import api
from services.console.web import Console
from services.watcher import main as watcher_main
from services.workload.handlers import WorkloadService

SPEC = {
    "model": {
        "id": "Qwen/Qwen3-0.6B",
        "source": "huggingface",
        "storage": {
            "volumes": [
                {
                    "name": "cache",
                    "purpose": "modelCache",
                    "size": "20Gi",
                    "claimName": "",
                    "accessMode": "ReadWriteMany",
                    "mountPath": "/model-cache",
                    "readOnly": False,
                }
            ]
        },
    },
    "engine": {"type": "vllm", "trustRemoteCode": False, "enablePrefixCaching": True, "enforceEager": False},
    "serving": {"mode": "aggregated"},
    "resources": {"gpu": {"count": 1, "type": "nvidia.com/gpu"}},
    "scaling": {"replicas": 1},
}


def manifest(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": f"m{i}", "namespace": "bench"},
        "spec": {
            "model": {"id": "Qwen/Qwen3-0.6B", "storage": {"volumes": [{"name": "cache", "purpose": "modelCache", "size": "20Gi"}]}},
            "engine": {"type": "vllm"},
        },
    }


async def rendered_all(workload: WorkloadService, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(1 for d in workload.state.deployments.values() if d.rendered is not None) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sum(1 for d in workload.state.deployments.values() if d.rendered)} of {n} rendered")
        await asyncio.sleep(0.02)


async def start_pipeline(nc: Any) -> tuple[list[Runner], list[asyncio.Task[None]], WorkloadService]:
    runners = catalog.runners(await catalog.start(Context(nc, None, replicated=False), catalog.PIPELINE))  # as `jetway up` does
    tasks = [asyncio.create_task(r.run()) for r in runners]
    await asyncio.gather(*(r.ready.wait() for r in runners))
    workload = runners[2].service
    assert isinstance(workload, WorkloadService)
    return runners, tasks, workload


async def burst(n: int) -> dict[str, float]:
    server = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-reconcile-"))).start()
    nc = await connect(server.url, name="bench")
    js = nc.jetstream(timeout=30)
    await ensure_streams(js)
    runners, tasks, workload = await start_pipeline(nc)
    store = EventStore(nc, producer="watcher")
    started = time.perf_counter()
    for start in range(0, n, 64):
        await asyncio.gather(
            *(
                store.append(
                    Key("ModelDeployment", "bench", f"m{i}").subject(),
                    ResourceApplied(kind="ModelDeployment", namespace="bench", name=f"m{i}", generation=1, spec=SPEC, uid=f"uid-{i}"),
                )
                for i in range(start, min(start + 64, n))
            )
        )
    await rendered_all(workload, n, timeout=600)
    seconds = time.perf_counter() - started
    for runner in runners:
        runner.stop()
    await asyncio.gather(*tasks)
    # the floor: 4·N raw publishes, 64 in flight, on the same server
    data = encode(
        new_envelope(
            "jetway.evt.raw.bench.x.spec", ResourceApplied(kind="x", namespace="", name="x", generation=1, spec=SPEC), producer="bench"
        )
    )
    raw_started = time.perf_counter()
    for start in range(0, 4 * n, 64):
        await asyncio.gather(
            *(js.publish(f"jetway.evt.raw.bench.r{i}.spec", data, stream=EVENTS_STREAM) for i in range(start, min(start + 64, 4 * n)))
        )
    raw = time.perf_counter() - raw_started
    await nc.close()
    server.stop()
    return {
        "deployments": n,
        "seconds": round(seconds, 2),
        "per_second": round(n / seconds),
        "ms_per_deployment": round(1000 * seconds / n, 2),
        "raw_floor_seconds": round(raw, 2),
        "ratio_to_floor": round(seconds / raw, 2),
    }


async def through_the_api(n: int) -> dict[str, float]:
    server = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-reconcile-api-"))).start()
    nc = await connect(server.url, name="bench")
    await ensure_streams(nc.jetstream())
    watcher = watcher_main.build(nc)
    token = secrets.token_urlsafe(16)
    door = api.standalone(nc, watcher.service, token, Console())
    watcher_task = asyncio.gather(watcher.runner.run(), door.runner.run())
    await watcher.runner.ready.wait()
    await door.runner.ready.wait()
    runners, tasks, workload = await start_pipeline(nc)
    runner, port = await api.serve(door.app, "127.0.0.1", 0)
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        started = time.perf_counter()

        async def post(i: int) -> None:
            async with session.post(f"http://127.0.0.1:{port}/v1/apply", json=manifest(i)) as response:
                assert response.status == 201, await response.text()

        for start in range(0, n, 64):
            await asyncio.gather(*(post(i) for i in range(start, min(start + 64, n))))
        applied = time.perf_counter() - started
        await rendered_all(workload, n, timeout=600)
        seconds = time.perf_counter() - started
    await runner.cleanup()
    for r in [*runners, watcher.runner, door.runner]:
        r.stop()
    await asyncio.gather(*tasks, watcher_task)
    await nc.close()
    server.stop()
    return {"deployments": n, "apply_seconds": round(applied, 2), "seconds": round(seconds, 2), "per_second": round(n / seconds)}


async def main(sizes: list[int]) -> dict[str, Any]:
    rows = [await burst(n) for n in sizes]
    api_row = await through_the_api(1000)
    print(f"{'deployments':>12}{'seconds':>9}{'per s':>8}{'ms each':>9}{'floor s':>9}{'x floor':>9}")
    for row in rows:
        print(
            f"{row['deployments']:>12,}{row['seconds']:>9}{row['per_second']:>8}{row['ms_per_deployment']:>9}"
            f"{row['raw_floor_seconds']:>9}{row['ratio_to_floor']:>9}"
        )
    print(
        f"through the apply API: {api_row['deployments']:,} applied in {api_row['apply_seconds']} s, all rendered after "
        f"{api_row['seconds']} s ({api_row['per_second']}/s)"
    )
    return {"bursts": rows, "apply_api": api_row}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = asyncio.run(main([int(s) for s in options.sizes.split(",")]))
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
