"""Restart time with and without a snapshot (runtime/snapshots.py), measured in one run on one server.

    .venv/bin/python -m bench.snapshots [--events 100000] [--tail 1000] [--services watcher,selector] [--json FILE]

The stream is filled with `--events` ModelDeployment events (5,000 resources, one new generation each
time), a snapshot of each service is written, then `--tail` more events arrive. Each service is then
restarted twice, as a fresh process would: without a snapshot (the full replay) and with one (load it,
replay the tail); the ratio is with/without. The raw baseline is a plain ordered consumer counting the
whole stream, the floor of any full replay. The watcher folds every event into the resources projection;
the selector also reads each spec into a validated ModelDeployment (the heavier fold).

NATS runs with Jetway's shipped `sync_interval: always`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.js import api

from bench.eventstore import event
from contracts.events import encode, new_envelope
from runtime.bus import EVENTS_STREAM, connect, ensure_streams
from runtime.natsserver import NatsServer
from runtime.service import Runner, RunnerSettings, Service
from runtime.snapshots import SnapshotSettings, SnapshotStore
from services.selector.handlers import SelectorService
from services.watcher.handlers import WatcherService

SERVICES: dict[str, Callable[[], Service]] = {"watcher": WatcherService, "selector": SelectorService}
WITH = RunnerSettings(snapshots=SnapshotSettings(every_events=10**12, every_seconds=10.0**9))  # written only when asked
WITHOUT = RunnerSettings(snapshots=SnapshotSettings(enabled=False))


async def fill(nc: Client, start: int, count: int) -> None:
    js = nc.jetstream(timeout=60)
    pending = []
    for i in range(start, start + count):
        subject, body = event(i)
        pending.append(await js.publish_async(subject, encode(new_envelope(subject, body, producer="bench"))))
        if len(pending) >= 4000:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)


async def raw_read(nc: Client, count: int) -> float:
    js = nc.jetstream(timeout=60)
    done = asyncio.Event()
    seen = 0

    async def counted(msg: Any) -> None:
        nonlocal seen
        seen += 1
        if seen >= count:
            done.set()

    started = time.perf_counter()
    sub = await js.subscribe("jetway.evt.>", stream=EVENTS_STREAM, cb=counted, ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL)
    await done.wait()
    seconds = time.perf_counter() - started
    await sub.unsubscribe()
    return seconds


async def restart(nc: Client, name: str, settings: RunnerSettings) -> tuple[float, Runner]:
    runner = Runner(SERVICES[name](), nc, settings)
    started = time.perf_counter()
    await runner.rebuild()
    return time.perf_counter() - started, runner


async def main(events: int, tail: int, names: list[str]) -> dict[str, Any]:
    server = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-bench-"))).start()
    nc = await connect(server.url, name="bench")
    await ensure_streams(nc.jetstream(timeout=30))
    started = time.perf_counter()
    await fill(nc, 0, events)
    print(f"filled {events:,} events in {time.perf_counter() - started:.1f} s")
    written: dict[str, dict[str, Any]] = {}
    for name in names:
        seconds, runner = await restart(nc, name, WITH)
        begun = time.perf_counter()
        task = runner.snapshot_now()
        assert task is not None
        encoded = time.perf_counter() - begun
        await task
        assert runner.snapshots_written == 1, f"{name}: the snapshot was not stored"
        data = await SnapshotStore(nc.jetstream(timeout=30), name).get()
        written[name] = {
            "first_rebuild_s": round(seconds, 2),
            "snapshot_bytes": len(data or b""),
            "encode_s": round(encoded, 3),
            "write_s": round(time.perf_counter() - begun, 3),
        }
    await fill(nc, events, tail)
    total = events + tail
    raw_seconds = await raw_read(nc, total)
    rows: dict[str, Any] = {}
    for name in names:
        without, full = await restart(nc, name, WITHOUT)
        with_, restored = await restart(nc, name, WITH)
        assert restored.restored is not None and restored.restored.seq == events, f"{name}: the snapshot was not used"
        assert restored.service.projection() == full.service.projection(), f"{name}: projections differ"
        rows[name] = {
            "without_s": round(without, 3),
            "with_s": round(with_, 3),
            "ratio": round(with_ / without, 4),
            "speedup": round(without / with_, 1),
            "replayed_with": restored.replayed,
            "replayed_without": full.replayed,
            **written[name],
        }
    await nc.close()
    server.stop()
    result: dict[str, Any] = {"events": events, "tail": tail, "raw_read_s": round(raw_seconds, 3), "restarts": rows}
    print(f"raw ordered consumer, {total:,} events: {raw_seconds:.2f} s")
    print(f"{'service':<10} {'without':>9} {'with':>8} {'with/without':>13} {'snapshot':>10} {'written in':>11}")
    for name, row in rows.items():
        print(
            f"{name:<10} {row['without_s']:>8.2f}s {row['with_s']:>7.3f}s {row['ratio']:>13.4f} "
            f"{row['snapshot_bytes'] / 1e6:>8.2f}MB {row['write_s']:>10.2f}s"
        )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--tail", type=int, default=1_000)
    parser.add_argument("--services", default="watcher,selector")
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    outcome = asyncio.run(main(options.events, options.tail, options.services.split(",")))
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
