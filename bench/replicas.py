"""Scale-out: the pipeline (selector, storage, workload) at 1, 2 and 3 replicas per service, each replica its own
process (`python -m services.<name>`, as deploy/ runs them), on one NATS server, measured in one run; then the
hand-over after one replica of each service is killed (SIGKILL).

    .venv/bin/python -m bench.replicas [--deployments 2000] [--ttl 5] [--json bench/results/replicas.json]

Throughput: ModelDeployments appended as the watcher records them (spread over 64 namespaces, so over every
partition), from the first append to the last WorkloadRendered, in deployments per second; the ratio is to one
replica per service. Hand-over: from the kill to the survivors holding every partition (read from the lease
bucket), and to the first deployment applied after the kill rendered by a survivor that took a dead one's
partition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from nats.aio.client import Client

from bench.router import stop_all
from contracts.events import Envelope, ResourceApplied, decode
from contracts.pipeline import WorkloadRendered
from contracts.subjects import ALL_PARTITIONS, WORKLOAD, Key, kind_filter
from runtime.bus import EVENTS_STREAM, connect, ensure_streams
from runtime.eventstore import EventStore
from runtime.leases import BUCKET, Leases, bucket
from runtime.natsserver import NatsServer, free_port

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("selector", "storage", "workload")
NAMESPACES = 64


@dataclass
class Process:
    popen: subprocess.Popen[bytes]
    health: int  # its health port
    log: Path

    def alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.log.stem} exited with {self.popen.returncode}:\n{tail}")


@contextlib.contextmanager
def replicas(url: str, count: int, ttl: float, logs: Path) -> Iterator[dict[str, list[Process]]]:
    running: dict[str, list[Process]] = {name: [] for name in SERVICES}
    try:
        for name in SERVICES:
            for index in range(count):
                env = {
                    **os.environ,
                    "JETWAY_NATS_URL": url,
                    "JETWAY_MODE": "standalone",
                    "JETWAY_REPLICA": f"{name}-{index}",
                    "JETWAY_LEASE_TTL_SECONDS": str(ttl),
                    "JETWAY_HEALTH_HOST": "127.0.0.1",
                    "JETWAY_HEALTH_PORT": str(free_port()),
                    "JETWAY_SNAPSHOTS": "off",
                    "JETWAY_IMAGE_RESOLUTION": "off",
                    "JETWAY_LOG_LEVEL": "warning",
                }
                path = logs / f"{name}-{index}.log"
                command = [sys.executable, "-m", f"services.{name}"]
                popen = subprocess.Popen(command, cwd=ROOT, env=env, stdout=path.open("wb"), stderr=subprocess.STDOUT)
                running[name].append(Process(popen, int(env["JETWAY_HEALTH_PORT"]), path))
        yield running
    finally:
        stop_all([p.popen for processes in running.values() for p in processes], timeout=30)


async def ready(processes: dict[str, list[Process]], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        for procs in processes.values():
            for process in procs:
                while True:
                    process.alive()
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(f"http://127.0.0.1:{process.health}/readyz") as response:
                            if response.status == 200:
                                break
                    if time.monotonic() > deadline:
                        raise TimeoutError("replicas not ready")
                    await asyncio.sleep(0.2)


# a small vLLM ModelDeployment's spec, as examples/modeldeployment-vllm.yaml has it less its options
SPEC: dict[str, Any] = {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}, "resources": {"gpu": {"count": 1}}}


def applied(index: int, prefix: str) -> tuple[Key, ResourceApplied]:
    namespace = f"team-{index % NAMESPACES}"
    key = Key("ModelDeployment", namespace, f"{prefix}{index}")
    spec = {**SPEC, "provider": {"name": "vllm"}}
    return key, ResourceApplied(kind=key.kind, namespace=namespace, name=key.name, generation=1, spec=spec, uid=f"uid-{prefix}{index}")


async def append(store: EventStore, count: int, prefix: str) -> None:
    limit = asyncio.Semaphore(64)

    async def one(index: int) -> None:
        key, event = applied(index, prefix)
        async with limit:
            await store.append(key.subject(), event, expected_seq=0)

    await asyncio.gather(*(one(i) for i in range(count)))


class Rendered:
    """Counts WorkloadRendered decisions as they are stored (an ordered consumer from the start)."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.names: set[str] = set()
        self.changed = asyncio.Event()
        self._sub: Any = None

    async def start(self) -> None:
        async def seen(msg: Any) -> None:
            envelope = decode(msg.data, subject=msg.subject)
            if isinstance(envelope, Envelope) and isinstance(envelope.event, WorkloadRendered):
                self.names.add(envelope.key.name)
                self.changed.set()

        self._sub = await self.nc.jetstream().subscribe(kind_filter("ModelDeployment", WORKLOAD), cb=seen, ordered_consumer=True)

    async def until(self, check: Any, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while not check(self.names):
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), max(0.1, deadline - time.monotonic()))

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()


async def held(js: Any, service: str) -> dict[str, str]:
    """partition → holder, as the lease bucket says now."""
    observer = Leases(js, service, ALL_PARTITIONS, replica="bench-observer")
    observer._kv = await bucket(js, 5.0)
    view = await observer.read()
    return {p: holder for p, (holder, _) in view.holders.items()}


async def fresh(nc: Client) -> None:
    js = nc.jetstream(timeout=30)
    with contextlib.suppress(Exception):
        await js.delete_stream(EVENTS_STREAM)
    with contextlib.suppress(Exception):
        await js.delete_key_value(BUCKET)
    await ensure_streams(js)


async def throughput(url: str, count: int, deployments: int, ttl: float, logs: Path) -> float:
    nc = await connect(url, name="bench")
    try:
        await fresh(nc)
        with replicas(url, count, ttl, logs) as running:
            await ready(running)
            rendered = Rendered(nc)
            await rendered.start()
            started = time.perf_counter()
            await append(EventStore(nc, producer="watcher"), deployments, "m")
            await rendered.until(lambda names: len(names) >= deployments)
            elapsed = time.perf_counter() - started
            await rendered.stop()
        return deployments / elapsed
    finally:
        await nc.close()


async def handover(url: str, count: int, ttl: float, logs: Path) -> dict[str, float]:
    nc = await connect(url, name="bench")
    try:
        await fresh(nc)
        js = nc.jetstream(timeout=10)
        with replicas(url, count, ttl, logs) as running:
            await ready(running)
            deadline = time.monotonic() + 60
            while True:  # the partitions shared: every replica holds some
                views = {name: await held(js, name) for name in SERVICES}
                if all(len(v) == len(ALL_PARTITIONS) and len(set(v.values())) == count for v in views.values()):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"partitions not shared: {views}")
                await asyncio.sleep(0.2)
            for procs in running.values():
                for process in procs:
                    process.alive()
            victims = {name: procs[0] for name, procs in running.items()}
            lost = {name: {p for p, h in views[name].items() if h == f"{name}-0"} for name in SERVICES}
            killed = time.perf_counter()
            for process in victims.values():
                process.popen.kill()
            taken: dict[str, float] = {}
            while len(taken) < len(SERVICES):
                for name in SERVICES:
                    if name not in taken:
                        holders = await held(js, name)
                        if all(holders.get(p, f"{name}-0") != f"{name}-0" for p in lost[name]):
                            taken[name] = time.perf_counter() - killed
                await asyncio.sleep(0.05)
            # a deployment in a partition the dead replicas held, rendered by the survivors
            rendered = Rendered(nc)
            await rendered.start()
            target = next(i for i in range(10_000) if applied(i, "late")[0].partition in lost["workload"])
            key, event = applied(target, "late")
            await EventStore(nc, producer="watcher").append(key.subject(), event, expected_seq=0)
            await rendered.until(lambda names: key.name in names)
            served = time.perf_counter() - killed
            await rendered.stop()
        found = {f"{name} partitions taken over (s)": round(t, 2) for name, t in taken.items()}
        return {**found, "first deployment rendered (s)": round(served, 2)}
    finally:
        await nc.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--ttl", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jetway-bench-replicas-") as directory:
        server = NatsServer(store_dir=Path(directory) / "nats").start()
        logs = Path(directory)
        try:
            rates = {}
            for count in (1, 2, 3):
                rates[count] = await throughput(server.url, count, args.deployments, args.ttl, logs)
                print(
                    f"{count} replica(s) per service: {rates[count]:8.1f} deployments/s  x{rates[count] / rates[1]:.2f} of one replica",
                    flush=True,
                )
            results: dict[str, Any] = {"deployments": args.deployments, "ttl_seconds": args.ttl, "per_second": rates}
            for count in (2, 3):
                found = await handover(server.url, count, args.ttl, logs)
                results[f"handover with {count} replicas"] = found
                print(f"hand-over, {count} replicas, one of each killed (TTL {args.ttl:g}s): {found}", flush=True)
        finally:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
